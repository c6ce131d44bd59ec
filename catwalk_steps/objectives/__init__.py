"""The training objectives, each one object that every stage asks (:mod:`.base`): `lm` (the
default: the right answer's tokens), `rank` (cross-entropy over the choices), `dpo` (DPO and
its variants on preference pairs, against a reference).

Adding an objective is one file here (an :class:`~.base.Objective` subclass and its instance,
its loss a pure function beside it) and its registration below (docs/guides/objective.md).
Nothing outside this room compares an objective's name.
"""

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
from .lm import LM
from .rank import RANK

register(LM, RANK, DPO)  # the registration; the first is the default

OBJECTIVE = LM.name  # the model block's `objective` when left out

__all__ = [
    "DPO",
    "OBJECTIVE",
    "ChoiceScores",
    "Examples",
    "Objective",
    "Reference",
    "objective_named",
    "objective_names",
    "reference_from",
    "with_settings",
]
