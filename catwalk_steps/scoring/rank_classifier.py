"""Rank classification over any Hugging Face causal LM.

A multiple-choice instance becomes one sequence per choice: context tokens followed by the
choice's (continuation) tokens. A choice's score is the sum of its continuation tokens'
log-probabilities; the predicted answer is the highest score (`acc`) or the highest score per
character (`acc_norm`, lm-evaluation-harness's definition). One `forward` serves training,
validation and prediction, so every rank of a sharded engine runs the same root forward.

Model code knows nothing of distribution or devices: batches arrive on the right device.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from tango.common.exceptions import ConfigurationError
from tango.integrations.torch import Model

from ..adapters.spec import LoraSpec, parse_adapter
from .causal_lm import build_causal_lm, checked_source
from .generation import decode_step
from .logprobs import choice_metrics, continuation_log_probs, lm_loss, weighted_mean
from .shared_context import log_fallback, packed_scores, packing_support
from .tokenization import load_tokenizer

OBJECTIVES = ("lm", "rank")


def identity_of(spec: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A rank classifier's cache identity from its spec (:meth:`RankClassifier.spec_of`): the
    same whether the model is built or only configured, so a step's unique id does not depend
    on whether its model was loaded when the step graph was built."""
    return ("RankClassifier", spec)


def with_umask_permissions(directory: Path) -> None:
    """Every file in `directory` gets the permissions of a file created here now."""
    mask = os.umask(0)
    os.umask(mask)
    for path in directory.iterdir():
        if path.is_file():
            path.chmod(0o666 & ~mask)


def check_model_arguments(
    pretrained: str | None,
    config: dict[str, Any] | None,
    tokenizer: str | None,
    objective: str,
    skeleton: bool = False,
) -> None:
    """The arguments, and a local `pretrained` directory whole (a skeleton: its config), before
    its tokenizer is read."""
    if objective not in OBJECTIVES:
        raise ConfigurationError(
            f"model.objective: expected one of {OBJECTIVES}, got {objective!r}"
        )
    if (pretrained is None) == (config is None):
        raise ConfigurationError("model: give exactly one of 'pretrained' or 'config'")
    if tokenizer is None and pretrained is None:
        raise ConfigurationError("model.tokenizer: required when the model is built from 'config'")
    if pretrained is not None:
        checked_source(pretrained, weights=not skeleton)


@Model.register("catwalk::rank_classifier")
class RankClassifier(Model):
    """Scores each choice of a multiple-choice instance with a causal LM, or generates.

    :param pretrained: hub name or local directory of a causal LM (e.g. "gpt2").
    :param config: instead of `pretrained`, a Hugging Face config dict (with `model_type`) for a
        randomly initialised model, e.g. a tiny GPT-2 for tests.
    :param tokenizer: hub name, path, or "catwalk::byte_level"; defaults to `pretrained`.
    :param objective: "lm" trains on the right choice's continuation tokens (mean token NLL, as
        catwalk trains rank classification); "rank" is cross-entropy over the choices' scores.
    :param init_seed: seed for the random init of a `config` model, and of the adapter's.
    :param adapter: a LoRA adapter to train instead of the whole model, `{type: 'lora', r,
        alpha, dropout, target_modules}` (:mod:`catwalk_steps.adapters`): only its weights
        require gradients, the base's stay as they were loaded.
    :param skeleton: build the LM on the meta device, without weights (for sharded engines;
        not part of the model's identity).

    :ivar metrics_history, run_card: the history of the run that trained it and what produced
        it (config, versions, git commit, host), set by `catwalk::train`; None if untrained.
    """

    metrics_history: dict[str, list[dict[str, Any]]] | None
    run_card: dict[str, Any] | None

    def __init__(
        self,
        pretrained: str | None = None,
        config: dict[str, Any] | None = None,
        tokenizer: str | None = None,
        objective: str = "lm",
        init_seed: int = 0,
        adapter: dict[str, Any] | LoraSpec | None = None,
        skeleton: bool = False,
    ):
        super().__init__()
        self.metrics_history = None
        self.run_card = None
        self.adapter = parse_adapter(adapter)
        self.spec = self.spec_of(pretrained, config, tokenizer, objective, init_seed, self.adapter)
        check_model_arguments(pretrained, config, tokenizer, objective, skeleton)
        field = "model.tokenizer" if tokenizer else "model.pretrained"
        self.tokenizer = load_tokenizer(tokenizer or pretrained, field)
        self.lm = build_causal_lm(pretrained, config, init_seed, self.tokenizer, skeleton)
        self.objective = objective
        self.wrapping_root = "lm"  # modules_to_wrap: `transformer.h.0` is `lm.transformer.h.0`
        if self.adapter is not None:
            from ..adapters.lora import attach

            attach(self, self.lm, self.adapter, init_seed)
        self.supports_logits_to_keep = (
            "logits_to_keep" in inspect.signature(self.lm.forward).parameters
        )
        self.packing_unsupported = packing_support(self.lm)  # why not, or None
        self.fallback_logged = False

    @staticmethod
    def spec_of(
        pretrained: str | None = None,
        config: dict[str, Any] | None = None,
        tokenizer: str | None = None,
        objective: str = "lm",
        init_seed: int = 0,
        adapter: dict[str, Any] | LoraSpec | None = None,
    ) -> dict[str, Any]:
        """What identifies the model: its constructor arguments. `init_seed` seeds only a random
        init, so pretrained weights are the same model whatever it says (one evaluation of a
        pretrained model in a sweep, not one per seed), unless an adapter is drawn from it. A
        model without an adapter has no `adapter` key (its identity is what it was before
        adapters existed)."""
        spec = parse_adapter(adapter)
        drawn = pretrained is None or spec is not None
        identity = {
            "pretrained": pretrained,
            "config": config,
            "tokenizer": tokenizer,
            "objective": objective,
            "init_seed": init_seed if drawn else 0,
        }
        if spec is not None:
            identity["adapter"] = spec.as_config()
        return identity

    @property
    def base_spec(self) -> dict[str, Any]:
        """The base model's identity (the spec without the adapter): what an adapter
        checkpoint names instead of holding the base's weights."""
        return {key: value for key, value in self.spec.items() if key != "adapter"}

    def det_hash_object(self) -> Any:
        """Tango cache identity: the constructor arguments, not the (large) weights."""
        return identity_of(self.spec)

    @classmethod
    def from_directory(cls, directory: str | Path, objective: str = "lm") -> RankClassifier:
        """Loads a model saved by :meth:`save_pretrained` (weights and tokenizer)."""
        return cls(pretrained=str(directory), objective=objective)

    def save_pretrained(self, directory: str | Path, adapter_only: bool = False) -> None:
        """Writes a standard Hugging Face directory: `from_pretrained` loads it outside Tango.
        Every file gets the permissions of a file created here (transformers writes the weights
        0600, through a temporary file, the rest with the umask's).

        A model with an adapter writes the merged model (the adapter folded into the base
        weights) and, in `adapter/`, the peft adapter directory (`PeftModel.from_pretrained(base,
        directory / "adapter")`); with `adapter_only`, the adapter directory alone, into
        `directory`. The model itself keeps its adapter."""
        directory = Path(directory)
        if self.adapter is not None:
            from ..adapters.lora import merged_state
            from ..adapters.peft_directory import ADAPTER_DIR, write_adapter_directory

            base = self.spec["pretrained"]
            write_adapter_directory(
                self.lm, directory if adapter_only else directory / ADAPTER_DIR, base
            )
            if adapter_only:
                with_umask_permissions(directory)
                return
            self.lm.save_pretrained(directory, state_dict=merged_state(self.lm))
            with_umask_permissions(directory / ADAPTER_DIR)
        else:
            self.lm.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        with_umask_permissions(directory)

    @property
    def trainable_parameters(self) -> int:
        """The parameters training updates: the adapter's, else the whole model's."""
        from ..adapters.lora import parameter_counts

        return parameter_counts(self)[0]

    def score_sequences(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        continuation_mask: torch.Tensor,
        logits_from: int = 1,
    ) -> torch.Tensor:
        """Each sequence's summed continuation log-probability (float32)."""
        return continuation_log_probs(
            self.lm,
            input_ids,
            attention_mask,
            continuation_mask,
            logits_from,
            self.supports_logits_to_keep,
        )

    def shares_contexts(self) -> bool:
        """Whether choices are scored against their context computed once (packed rows, see
        :mod:`~catwalk_steps.scoring.shared_context`); says once, in the log, why not."""
        if self.packing_unsupported and not self.fallback_logged:
            log_fallback(self.lm, self.packing_unsupported)
            self.fallback_logged = True
        return self.packing_unsupported is None

    def score_packed(self, packed: Mapping[str, torch.Tensor], num_sequences: int) -> torch.Tensor:
        """Each sequence's summed continuation log-probability from packed rows (float32)."""
        return packed_scores(self.lm, packed, num_sequences)

    def every_choice_scores(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        continuation_mask: torch.Tensor,
        logits_from: int,
        packed: Mapping[str, torch.Tensor] | None,
    ) -> torch.Tensor:
        """Every sequence's score: from the packed rows when the model takes them."""
        if packed is not None and self.shares_contexts():
            return self.score_packed(packed, input_ids.size(0))
        return self.score_sequences(input_ids, attention_mask, continuation_mask, logits_from)

    def forward(  # type: ignore[override]
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        decoding: Mapping[str, Any] | None = None,
        **batch: Any,
    ) -> dict[str, Any]:
        """A batch of multiple-choice instances (:meth:`choice_outputs`), or a `decoding` step
        of generation (positions, cache): the next token's logits and the cache
        (:func:`~catwalk_steps.scoring.generation.decode_step`). One forward, through the
        engine's root wrapper, for both."""
        if decoding is not None:
            return decode_step(self.lm, input_ids, attention_mask, **decoding)
        return self.choice_outputs(input_ids, attention_mask, **batch)

    def choice_outputs(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        continuation_mask: torch.Tensor,
        instance_index: torch.Tensor,
        choice_index: torch.Tensor,
        choice_chars: torch.Tensor,
        labels: torch.Tensor,
        weights: torch.Tensor,
        logits_from: int = 1,
        num_choices: int | None = None,
        packed: Mapping[str, torch.Tensor] | None = None,
    ) -> dict[str, Any]:
        """Loss and metrics for a batch of instances, each with all its choices. Sequence `s` is
        choice `choice_index[s]` of instance `instance_index[s]`. Training with the "lm"
        objective runs the right choices only (the others are not in the loss); otherwise every
        choice is scored, from the `packed` rows when the model takes them: one forward of the
        LM on every rank, whatever the batch holds (a kind's metrics are computed from its
        `scores` after the forward: :mod:`catwalk_steps.kinds`)."""
        # Sharded engines may cast floating inputs to the compute dtype; counting stays float32.
        weights = weights.float()
        right = choice_index == labels[instance_index]
        right_instances = instance_index[right]
        if self.training and self.objective == "lm":
            right_scores = self.score_sequences(
                input_ids[right], attention_mask[right], continuation_mask[right], logits_from
            )
            return {
                "loss": lm_loss(
                    right_scores, continuation_mask[right], right_instances, labels, weights
                )
            }
        num_choices = num_choices or int(choice_index.max()) + 1
        sequence_scores = self.every_choice_scores(
            input_ids, attention_mask, continuation_mask, logits_from, packed
        )
        where, shape = (instance_index, choice_index), (labels.size(0), num_choices)
        scores = sequence_scores.new_full(shape, float("-inf")).index_put(where, sequence_scores)
        chars = torch.ones_like(scores).index_put(where, choice_chars.to(scores.dtype))
        with torch.no_grad():
            counts = choice_metrics(scores.detach(), labels, chars, weights)
        if self.objective == "rank":
            loss = weighted_mean(F.cross_entropy(scores, labels, reduction="none"), weights)
        else:
            loss = lm_loss(
                sequence_scores[right], continuation_mask[right], right_instances, labels, weights
            )
        count = counts["count"].clamp(min=1.0)
        outputs: dict[str, Any] = {
            "loss": loss,
            "scores": scores.detach(),
            "acc": counts["correct"] / count,
            "acc_norm": counts["correct_norm"] / count,
            **counts,
        }
        return outputs
