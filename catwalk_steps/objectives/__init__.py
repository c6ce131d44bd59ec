"""The training objectives, each one object that every stage asks (:mod:`.base`): `lm` (the
default: the right answer's tokens), `rank` (cross-entropy over the choices), `dpo` (DPO and
its variants on preference pairs, against a reference), `grpo` (GRPO on a generative task's
prompts, its completions sampled and rewarded in the loop).

Adding an objective is one file here (an :class:`~.base.Objective` subclass and its instance,
its loss a pure function beside it) and its registration below (docs/guides/objective.md).
Nothing outside this room compares an objective's name.
"""

from typing import Any

from ..components import model_params
from .base import (
    ChoiceScores,
    Examples,
    Objective,
    Reference,
    objective_named,
    objective_names,
    reference_from,
    register,
    with_settings,
)
from .dpo import DPO
from .grpo import GRPO
from .lm import LM
from .rank import RANK

register(LM, RANK, DPO, GRPO)  # the registration; the first is the default

OBJECTIVE = LM.name  # the model block's `objective` when left out


def objective_of(model: Any) -> Objective:
    """The objective a model block names (a lazy block; the default when it leaves it out, or
    for a model built already); one line for one not registered."""
    return objective_named(model_params(model).get("objective", OBJECTIVE))


def updates_per_batch(model: Any) -> int:
    """Optimizer steps one batch of the training loader gives under a model block's objective
    (GRPO's `num_iterations`: a generation batch trained on μ times); 1 for the others."""
    objective = objective_of(model)
    return objective.updates_per_batch(model_params(model).get(objective.name))


__all__ = [
    "DPO",
    "GRPO",
    "OBJECTIVE",
    "ChoiceScores",
    "Examples",
    "Objective",
    "Reference",
    "objective_named",
    "objective_of",
    "objective_names",
    "reference_from",
    "updates_per_batch",
    "with_settings",
]
