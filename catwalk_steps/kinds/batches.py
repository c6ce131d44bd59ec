"""What a kind answers about its batches' tokens (a part of :class:`~.base.TaskKind`): the
texts a training batch of it tokenizes for an instance, the batch made from their tokens
whether they are tokenized then or were stored once (:mod:`catwalk_steps.tokenized`: equal
batches either way), and what the collate's `max_length` cuts, counted from those tokens."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from tango.common.exceptions import ConfigurationError

from ..scoring.tokenization import Known, TextKey


class Batches:
    name: ClassVar[str]

    def check_packing(self, task: str, loader: Any) -> None:
        """Training on task `task` of this kind with the training `loader` (its settings): only
        generative (SFT) training examples are packed (`collate_fn.packing`)."""
        if loader.packing:
            raise ConfigurationError(
                f"{loader.collate_key('packing')}: packs generative (SFT) training examples, "
                f"and task '{task}' is {self.name.replace('_', ' ')}; leave packing out"
            )

    def collate(
        self, collator: Any, instances: list, weights: list[float], known: Known | None = None
    ) -> Any:
        """A batch of `instances` (`weights`: 0 for padding) for one forward; `known`: the
        tokens of their :meth:`token_texts`, as stored once (None: tokenized here)."""
        raise NotImplementedError

    def token_texts(self, collator: Any, instance: Any) -> list[TextKey]:
        """The texts a training batch of this kind tokenizes for `instance`, each once, with
        whether the tokenizer adds its special tokens: what is tokenized once and stored, and
        read back by :meth:`collate` as `known`."""
        raise NotImplementedError

    def cuts(self, collator: Any, instances: Sequence[Any], known: Known) -> tuple[int, int]:
        """(instances whose prompt loses its start, instances with an answer cut) in the
        collate's `max_length`, from their tokens (`known`): what `prompts_cut` and
        `answers_cut` say, counted as a training batch cuts, while the tokens are stored."""
        return 0, 0
