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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import torch
from tango.common.exceptions import ConfigurationError
from tango.integrations.torch import Model

from ..adapters.base import AdapterSpec
from ..adapters.registry import parse_adapter, type_of
from ..module_names import ModuleNaming
from ..objectives import DPO, GRPO, OBJECTIVE, objective_named
from ..settings import INIT_SEED
from ..tasks.chat_templates import ChatTemplate
from .causal_lm import build_causal_lm, checked_source
from .choice_scoring import ChoiceScoring
from .generation import decode_step
from .grpo_objective import completion_logps, grpo_outputs
from .model_saving import save_model_directory
from .packed_documents import document_loss
from .preference_objective import PreferenceScoring
from .shared_context import packing_support
from .tokenization import load_tokenizer


def plain_block(value: Any) -> Any:
    """A settings block as plain data, however deep (Tango's `Params` in a list as a dict, a
    tuple as a list): the model's identity is written as JSON (an adapter's base)."""
    if isinstance(value, Mapping):
        return {key: plain_block(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_block(item) for item in value]
    return value


def identity_of(spec: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A rank classifier's cache identity from its spec (:meth:`RankClassifier.spec_of`): the
    same whether the model is built or only configured, so a step's unique id does not depend
    on whether its model was loaded when the step graph was built."""
    return ("RankClassifier", spec)


def check_model_arguments(
    pretrained: str | None,
    config: dict[str, Any] | None,
    tokenizer: str | None,
    objective: str,
    skeleton: bool = False,
) -> None:
    """The arguments, and a local `pretrained` directory whole (a skeleton: its config), before
    its tokenizer is read."""
    objective_named(objective)
    if (pretrained is None) == (config is None):
        raise ConfigurationError("model: give exactly one of 'pretrained' or 'config'")
    if tokenizer is None and pretrained is None:
        raise ConfigurationError("model.tokenizer: required when the model is built from 'config'")
    if pretrained is not None:
        checked_source(pretrained, weights=not skeleton)


@Model.register("catwalk::rank_classifier")
class RankClassifier(Model, ModuleNaming, ChoiceScoring, PreferenceScoring):
    """Scores each choice of a multiple-choice instance with a causal LM, or generates.

    :param pretrained: hub name or local directory of a causal LM (e.g. "gpt2").
    :param config: instead of `pretrained`, a Hugging Face config dict (with `model_type`) for a
        randomly initialised model, e.g. a tiny GPT-2 for tests.
    :param tokenizer: hub name, path, or "catwalk::byte_level"; defaults to `pretrained`.
    :param chat_template: a chat template for the tokenizer (one without its own, or to replace
        it): the Jinja template, or the path of a file that holds one. It renders the prompts
        of tasks with `apply_chat_template` and chat rows, and is saved with the trained
        model's tokenizer.
    :param objective: "lm" trains on the right choice's continuation tokens (mean token NLL, as
        catwalk trains rank classification); "rank" is cross-entropy over the choices' scores;
        "dpo" trains on preference pairs (a preference task) by its `dpo` settings
        (:mod:`catwalk_steps.objectives`); "grpo" trains on a generative task's prompts, its
        completions sampled and rewarded in the loop, by its `grpo` settings.
    :param dpo: with objective "dpo": `{beta, loss_type, label_smoothing, rpo_alpha}`
        (:class:`~catwalk_steps.objectives.dpo.DpoSettings`, TRL's names and defaults).
    :param grpo: with objective "grpo": `{num_generations, temperature, ..., reward_funcs}`
        (:class:`~catwalk_steps.objectives.grpo.GrpoSettings`, TRL's names and defaults).
    :param init_seed: seed for the random init of a `config` model, and of the adapter's.
    :param adapter: an adapter to train instead of the whole model, `{type: 'lora', r, alpha,
        dropout, target_modules}` or another registered type's block
        (:mod:`catwalk_steps.adapters`): only its weights require gradients, the base's stay as
        they were loaded.
    :param skeleton: build the LM on the meta device, without weights (for sharded engines;
        not part of the model's identity).
    :param metrics_history: the history of the run that trained it; given by the code that
        builds a trained model (`catwalk::train`, a checkpoint's or a stored model's reader),
        never a key of a config, nor part of its identity. None if untrained.
    :param run_card: what produced it (config, versions, git commit, host), given likewise.
    """

    # modules_to_wrap, target_modules: `transformer.h.0` is also `lm.transformer.h.0`.
    wrapping_root = "lm"

    def __init__(
        self,
        pretrained: str | None = None,
        config: dict[str, Any] | None = None,
        tokenizer: str | None = None,
        objective: str = OBJECTIVE,
        init_seed: int = INIT_SEED,
        adapter: dict[str, Any] | AdapterSpec | None = None,
        skeleton: bool = False,
        dpo: dict[str, Any] | None = None,
        chat_template: str | None = None,
        grpo: dict[str, Any] | None = None,
        metrics_history: dict[str, list[dict[str, Any]]] | None = None,
        run_card: dict[str, Any] | None = None,
    ):
        super().__init__()
        self.metrics_history, self.run_card = metrics_history, run_card
        self.adapter = parse_adapter(adapter)
        self.spec = self.spec_of(
            pretrained,
            config,
            tokenizer,
            objective,
            init_seed,
            self.adapter,
            dpo,
            chat_template,
            grpo,
        )
        check_model_arguments(pretrained, config, tokenizer, objective, skeleton)
        self.objective = objective_named(objective)
        self.dpo = DPO.settings_of(self.objective, dpo)
        self.grpo = GRPO.settings_of(self.objective, grpo)
        field = "model.tokenizer" if tokenizer else "model.pretrained"
        template = ChatTemplate.of(chat_template, "model.chat_template")
        # One of the two is given.
        self.tokenizer = load_tokenizer(cast(str, tokenizer or pretrained), field, template)
        self.lm = build_causal_lm(pretrained, config, init_seed, self.tokenizer, skeleton)
        if self.adapter is not None:
            type_of(self.adapter).attach(self, self.lm, self.adapter, init_seed)
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
        objective: str = OBJECTIVE,
        init_seed: int = INIT_SEED,
        adapter: dict[str, Any] | AdapterSpec | None = None,
        dpo: dict[str, Any] | None = None,
        chat_template: str | None = None,
        grpo: dict[str, Any] | None = None,
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
            "init_seed": init_seed if drawn else INIT_SEED,
        }
        if spec is not None:
            identity["adapter"] = spec.as_config()
        if dpo is not None:  # (left out: the identity of a model before DPO existed)
            identity["dpo"] = dict(dpo)
        if grpo is not None:
            identity["grpo"] = plain_block(grpo)  # (its rewards' blocks in a list)
        if chat_template is not None:  # a file's content: the step's `model_content`
            identity["chat_template"] = chat_template
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
    def from_directory(
        cls,
        directory: str | Path,
        objective: str = OBJECTIVE,
        dpo: dict[str, Any] | None = None,
        **trained: Any,
    ) -> RankClassifier:
        """Loads a model saved by :meth:`save_pretrained` (weights and tokenizer); `trained`:
        its `metrics_history` and `run_card`, as stored beside it."""
        return cls(pretrained=str(directory), objective=objective, dpo=dpo, **trained)

    def save_pretrained(self, directory: str | Path, adapter_only: bool = False) -> None:
        """Writes a standard Hugging Face directory that `from_pretrained` loads outside Tango
        (with an adapter: the merged model and the peft adapter directory; with `adapter_only`,
        the adapter directory alone): :func:`.model_saving.save_model_directory`."""
        save_model_directory(self, Path(directory), adapter_only)

    @property
    def trainable_parameters(self) -> int:
        """The parameters training updates: the adapter's, else the whole model's."""
        from ..adapters.base import parameter_counts

        return parameter_counts(self)[0]

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoding: Mapping[str, Any] | None = None,
        preference: Mapping[str, torch.Tensor] | None = None,
        documents: Mapping[str, torch.Tensor] | None = None,
        subtasks: Sequence[str | None] | None = None,
        windows: Mapping[str, Any] | None = None,
        grpo: Mapping[str, Any] | None = None,
        grpo_reference: Mapping[str, Any] | None = None,
        **batch: Any,
    ) -> dict[str, Any]:
        """A batch of multiple-choice instances (:meth:`choice_outputs`), a batch of
        `preference` pairs (:meth:`preference_outputs`), training `documents` packed into rows
        (the `lm` objective's loss: :func:`~.packed_documents.document_loss`), a `decoding`
        step of generation (positions, cache): the next token's logits and the cache
        (:func:`~catwalk_steps.scoring.generation.decode_step`), or a corpus's rolling
        `windows` (perplexity): each window's summed log-probability of its predicted tokens
        (`scores`), or GRPO's sampled completions (`grpo`: its loss and metrics,
        :func:`~.grpo_objective.grpo_outputs`; as GRPO's frozen reference, `grpo_reference`:
        their log-probabilities alone). One forward, through the engine's root wrapper, for
        all seven. (`subtasks`,
        a grouped task's instances' parts, is for the kind's sums after the forward: the model
        reads nothing of it.)"""
        if windows is not None:
            return {"scores": self.score_sequences(**windows)}
        if preference is not None:
            return self.preference_outputs(preference, **batch)
        if grpo is not None:
            return grpo_outputs(self.lm, grpo, self.grpo, self.adapter)
        if grpo_reference is not None:
            return completion_logps(self.lm, grpo_reference, self.grpo.temperature)
        if documents is not None:
            return {"loss": document_loss(self.lm, documents, batch["weights"])}
        assert input_ids is not None and attention_mask is not None, "a batch of tokens"
        if decoding is not None:
            return decode_step(self.lm, input_ids, attention_mask, **decoding)
        return self.choice_outputs(input_ids, attention_mask, **batch)
