"""GRPO's frozen reference for a full model (`beta` > 0, no adapter; issue 59): the model block
it is built from (:func:`reference_block`, the same on every node), and in each worker the model
itself, placed under the training engine frozen (:meth:`~catwalk_steps.engines.base.
CatwalkEngine.frozen_model`: sharded as the policy is, never in the optimizer nor in a
checkpoint: it never changes, so a resumed run builds it again from its source), whose
log-probabilities of a generation batch's completions are computed once
(:class:`FrozenReference`), as TRL's GRPOTrainer computes its reference's.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tango.common import Lazy, Params
from tango.integrations.torch import Model

from ..components import model_params
from ..objectives import Reference, objective_of
from ..settings import TrainSettings
from ..settings.training import loading

MODEL_TYPE = "catwalk::rank_classifier"
# The policy's keys a reference does not take from its own block: it scores the completions
# as the policy's objective does (at the sampling temperature); it trains nothing.
POLICY_KEYS = ("objective", "dpo", "grpo")


def given_block(given: Any) -> dict[str, Any]:
    """A model block as the config gives it (lazy, or a mapping built in Python)."""
    return {"type": MODEL_TYPE, **model_params(given)}


def reference_block(settings: TrainSettings) -> dict[str, Any] | None:
    """The reference's model block for started `settings` (`init_from` and a step's model are
    directories by now): `train.reference` (a model block, or a model directory loaded into
    the policy's block), else the policy's block as it starts; the policy's objective and its
    settings in it. None when the objective compares with no frozen model (:meth:`~catwalk_
    steps.objectives.Objective.reference`)."""
    params = model_params(settings.model)
    objective = objective_of(settings.model)
    block_of = params.get(objective.name)
    if objective.reference(params.get("adapter"), block_of) is not Reference.MODEL:
        return None
    given = settings.reference
    if given is None:
        block = params
    elif isinstance(given, (str, Path)):
        block = loading(params, given, "train.reference")
    else:
        block = given_block(given)
    own = {key: value for key, value in block.items() if key not in POLICY_KEYS}
    return {**own, **{key: params[key] for key in POLICY_KEYS if key in params}}


def reference_model(settings: TrainSettings) -> Lazy[Model] | None:
    """:func:`reference_block` as the lazy model each worker builds."""
    block = reference_block(settings)
    return None if block is None else Lazy(Model, Params(block))


class FrozenReference:
    """The reference in one worker: built frozen by the engine; its log-probabilities of each
    `grpo` batch's completion tokens (at the sampling temperature) put in the batch as rows
    (`ref_logps`: engines cast no list). `forwards` counts its forwards."""

    def __init__(self, engine: Any, model: Lazy[Model]):
        self.engine = engine
        self.model = engine.frozen_model(model)
        self.forwards = 0

    def score(self, batches: list[dict[str, Any]]) -> None:
        """Each batch given `ref_logps`. Collective (every rank the same forwards)."""
        for batch in batches:
            grpo: Mapping[str, Any] = batch["grpo"]
            out = self.engine.forward_eval({"grpo_reference": grpo}, self.model)
            batch["grpo"]["ref_logps"] = out["grpo_logps"].float().cpu().tolist()
            self.forwards += 1
