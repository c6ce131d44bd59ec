"""From multiple-choice instances to token sequences: (context, continuation) pairs tokenized and
cut as lm-evaluation-harness does, and padded into CPU tensors (the batches themselves:
:mod:`.collate`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from tango.common.exceptions import ConfigurationError

from ..settings import MAX_LENGTH
from ..tasks import MultipleChoiceInstance, OlmoEvalInstance, TaskDataError
from ..tasks.base import joined_choice_chars
from .tokenization import Known, TextKey, tokenize_keys

CHARS_PER_TOKEN = 64


@dataclass(frozen=True)
class ChoiceSequence:
    """Tokens of one (context, choice) pair; the last `continuation_length` are the choice's."""

    token_ids: tuple[int, ...]
    continuation_length: int
    instance: int
    choice: int
    choice_chars: int


def answer_chars(choice: str) -> int:
    """The choice's length in characters, without the space that joins it to the context.

    lm-evaluation-harness divides by this length for `acc_norm`.
    """
    return joined_choice_chars(choice)


class SequenceEncoder:
    """Tokenizes (context, continuation) pairs as lm-evaluation-harness 0.4 does for causal LMs.

    The split is lm-eval's `_encode_pair` (:meth:`clip`): whitespace at the end of the context
    moves to the continuation; the context is tokenized alone and joined with the continuation,
    and the continuation's tokens are the joined text's past the context's own. Both use the
    tokenizer's special tokens, as lm-eval's `tok_encode` does: a tokenizer that adds BOS
    (Llama-style) starts the context with it, one that adds none (GPT-2) gets none, and a text
    that already starts with BOS gets no second one. An empty context is lm-eval's too: its
    prefix token (BOS, else EOS) before the continuation.

    `max_length` is the model's input length (lm-evaluation-harness's `max_length`). A pair is
    at most `max_length + 1` tokens: the model reads all but the last, which is only ever a
    target (:func:`~catwalk_steps.scoring.logprobs.continuation_log_probs` leaves it out of the
    input). Longer pairs lose context tokens on the left (BOS with them, as in lm-eval); the
    continuation is scored whole (its first `max_length` tokens, should it alone be longer).
    Encodings are memoised: contexts and continuations repeat across choices and epochs.
    """

    def __init__(self, tokenizer: Any, max_length: int = MAX_LENGTH, field: str = "max_length"):
        if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 2:
            raise ConfigurationError(
                f"{field}: must be a whole number >= 2 (context + answer tokens), "
                f"got {max_length!r}"
            )
        self.tokenizer = tokenizer
        self.max_length = max_length
        # lm-eval's `prefix_token_id`: what an empty context becomes.
        bos = tokenizer.bos_token_id
        self.prefix_id = bos if bos is not None else tokenizer.eos_token_id
        self.prefix_text = tokenizer.decode([self.prefix_id])
        # ai2-olmo-eval's BOS before a context: the tokenizer's, when the tokenizer adds one.
        adds_bos = bos is not None and tokenizer("a")["input_ids"][:1] == [bos]
        self.olmo_eval_bos = bos if adds_bos else None
        # No token covers more than CHARS_PER_TOKEN characters: longer texts can be cut first.
        self.char_limit = (max_length + 1) * CHARS_PER_TOKEN
        self._cache: dict[tuple[str, bool], tuple[int, ...]] = {}

    def key(self, text: str, special: bool = True) -> tuple[str, bool]:
        """`text` with the tokenizer's special tokens, unless it starts with the prefix token."""
        return text, special and not (self.prefix_text and text.startswith(self.prefix_text))

    def encode_all(self, keys: Sequence[tuple[str, bool]]) -> None:
        """Tokenizes the texts not seen yet in one batched call per setting of special tokens
        (much faster than one by one)."""
        self._cache.update(tokenize_keys(self.tokenizer, [k for k in keys if k not in self._cache]))

    def known(self, keys: Sequence[TextKey], known: Known | None) -> Known:
        """Where the tokens of `keys` are read from: `known` (a batch's stored tokens), else
        this encoder's memo, once they are tokenized into it."""
        if known is not None:
            return known
        self.encode_all(keys)
        return self._cache

    def clip(self, context: str, choice: str) -> tuple[str, str]:
        """lm-evaluation-harness's split of a pair, and only what can be used of it.

        Whitespace that ends the context starts the continuation instead (so " Paris" keeps
        its space-prefixed token). Only the end of a context and the start of a continuation
        can be used: a text far longer than `max_length` tokens (a 20 MB goal, say) is cut
        before it is tokenized. No token covers more than :data:`CHARS_PER_TOKEN` characters,
        so the kept tokens are the same."""
        stripped = context.rstrip()
        context, choice = stripped, context[len(stripped) :] + choice
        return context[-self.char_limit :], choice[: self.char_limit]

    def texts(self, context: str, choice: str) -> list[tuple[str, bool]]:
        """What :meth:`pair` tokenizes: the context, and context and continuation joined; the
        continuation alone for no context."""
        context, choice = self.clip(context, choice)
        if not context:
            return [self.key(choice, special=False)]
        return [self.key(context), self.key(context + choice)]

    def whole_pair(
        self, context: str, choice: str, known: Known | None = None
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The context's and the continuation's tokens of one pair, before any cut."""
        texts = self.texts(context, choice)
        found = self.known(texts, known)  # those not memoised yet, tokenized
        if len(texts) == 1:  # no context: lm-eval's prefix token, unless the choice starts so
            choice_ids = found[texts[0]]
            if choice_ids[:1] == (self.prefix_id,):
                context_ids, choice_ids = choice_ids[:1], choice_ids[1:]
            else:
                context_ids = (self.prefix_id,)
            if not choice_ids:
                raise TaskDataError(f"choice {choice!r} has no tokens")
        else:
            context_ids = found[texts[0]]
            choice_ids = found[texts[1]][len(context_ids) :]
            if not choice_ids:
                raise TaskDataError(
                    f"choice {choice!r} has no tokens of its own after context "
                    f"'...{context[-40:]}' (tokenized together, context and choice are no more "
                    "tokens than the context)"
                )
        return context_ids, choice_ids

    def pair(
        self, context: str, choice: str, known: Known | None = None
    ) -> tuple[tuple[int, ...], int]:
        """The tokens of one (context, continuation) pair and how many are the continuation's."""
        context_ids, choice_ids = self.whole_pair(context, choice, known)
        choice_ids = choice_ids[: self.max_length]
        return (context_ids + choice_ids)[-(self.max_length + 1) :], len(choice_ids)

    def olmo_eval_texts(self, context: str, choice: str) -> list[tuple[str, bool]]:
        return [(context[-self.char_limit :], False), (choice[: self.char_limit], False)]

    def olmo_eval_pair(
        self, context: str, choice: str, with_bos: bool = True, known: Known | None = None
    ) -> tuple[tuple[int, ...], int]:
        """A pair tokenized as ai2-olmo-eval does: context and continuation each alone, without
        special tokens; the BOS before the context (:attr:`olmo_eval_bos`) unless it starts so;
        the context cut on the left to fit (`query[-model_ctx_len:]`)."""
        texts = self.olmo_eval_texts(context, choice)
        found = self.known(texts, known)
        context_ids, choice_ids = (found[key] for key in texts)
        bos = self.olmo_eval_bos if with_bos else None
        if bos is not None and context_ids[:1] != (bos,):
            context_ids = (bos, *context_ids)
        if not context_ids or not choice_ids:
            raise TaskDataError(f"context '...{context[-40:]}' or choice {choice!r} has no tokens")
        if len(choice_ids) > self.max_length:  # olmo_eval scores whole continuations only
            raise TaskDataError(
                f"a continuation of {len(choice_ids)} tokens does not fit in max_length "
                f"{self.max_length}"
            )
        return (context_ids + choice_ids)[-(self.max_length + 1) :], len(choice_ids)

    def olmo_eval_lengths(self, instances: Sequence[OlmoEvalInstance]) -> list[int]:
        """Each document's longest continuation, in tokens as :meth:`olmo_eval_pair` counts."""
        self.encode_all([key for i in instances for key in self.instance_texts(i, alone=True)])
        return [self.longest_alone(i, self._cache) for i in instances]

    def longest_alone(self, instance: MultipleChoiceInstance, known: Known) -> int:
        """An instance's longest continuation tokenized alone (ai2-olmo-eval's encoding)."""
        return max(len(known[(choice[: self.char_limit], False)]) for choice in instance.choices)

    def answer_cut(self, instance: MultipleChoiceInstance, alone: bool, known: Known) -> bool:
        """Whether one of the instance's continuations is longer than `max_length` tokens (as
        :meth:`sequences` encodes it), so that it is cut (or, `alone`, refused)."""
        if alone:
            return self.longest_alone(instance, known) > self.max_length
        pairs = instance.pairs()
        return any(len(self.whole_pair(*pair, known)[1]) > self.max_length for pair in pairs)

    def instance_texts(
        self, instance: MultipleChoiceInstance, alone: bool
    ) -> list[tuple[str, bool]]:
        """What an instance's pairs tokenize: each text alone (`alone`, ai2-olmo-eval's
        encoding), or as lm-evaluation-harness joins them."""
        texts = self.olmo_eval_texts if alone else self.texts
        return [key for pair in instance.pairs() for key in texts(*pair)]

    def encoded(
        self,
        instance: MultipleChoiceInstance,
        context: str,
        choice: str,
        alone: bool,
        known: Known,
    ) -> tuple[tuple[int, ...], int]:
        if alone:
            assert isinstance(instance, OlmoEvalInstance)
            return self.olmo_eval_pair(context, choice, instance.conditioned, known)
        return self.pair(context, choice, known)

    def sequences(
        self,
        instances: Sequence[MultipleChoiceInstance],
        alone: bool = False,
        known: Known | None = None,
    ) -> list[ChoiceSequence]:
        """One sequence per choice of every instance, in instance order. `alone`: as
        ai2-olmo-eval encodes its documents (:meth:`olmo_eval_pair`: each text alone, BOS
        before a conditioned context), which its kind asks for; else lm-evaluation-harness's
        (:meth:`pair`). `known`: the instances' texts' tokens as stored (else tokenized)."""
        keys = [key for i in instances for key in self.instance_texts(i, alone)]
        found = self.known(keys, known)
        out = []
        for i, instance in enumerate(instances):
            chars = instance.norm_chars()
            for c, (context, choice) in enumerate(instance.pairs()):
                ids, continuation_length = self.encoded(instance, context, choice, alone, found)
                out.append(ChoiceSequence(ids, continuation_length, i, c, chars[c]))
        return out


def pad_sequences(sequences: Sequence[ChoiceSequence], pad_id: int) -> dict[str, Any]:
    """Right-padded token ids with attention and continuation masks (CPU tensors)."""
    length = max(len(s.token_ids) for s in sequences)
    input_ids = torch.tensor(
        [s.token_ids + (pad_id,) * (length - len(s.token_ids)) for s in sequences]
    )
    positions = torch.arange(length)
    ends = torch.tensor([len(s.token_ids) for s in sequences])[:, None]
    starts = ends - torch.tensor([s.continuation_length for s in sequences])[:, None]
    attention_mask = (positions < ends).long()
    continuation_mask = (positions >= starts) & (positions < ends)
    logits_from = int(starts.min())
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "continuation_mask": continuation_mask,
        "logits_from": logits_from,
    }
