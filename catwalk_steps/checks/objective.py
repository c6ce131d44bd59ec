"""Graph-build checks of a training step's objective (:mod:`catwalk_steps.objectives`), each
asked of the objective the model block names: that it is one (the default when left out), that
it trains on the examples the task's kind holds, each objective's settings block (one line for
an unknown `dpo.loss_type`, `beta` <= 0, another objective's block), and where its reference
comes from (the data of a `catwalk::reference_logprobs` step, cut as the loaders cut it, unless
the model's base with its adapter off is the reference)."""

from __future__ import annotations

from typing import Any

from tango import Step
from tango.common.exceptions import ConfigurationError

from ..components import model_params
from ..objectives import (
    Examples,
    Objective,
    Reference,
    objective_of,
    with_settings,
)
from ..settings import TrainSettings


def check_trained_task(model: Any, examples: Examples, task: str) -> None:
    """The task trained on, whose kind holds `examples`, fits the model's objective."""
    objective_of(model).check_task(examples, task)


def check_objective(settings: TrainSettings) -> None:
    """The model's objective's settings and its reference (see the module)."""
    params = model_params(settings.model)
    objective = objective_of(settings.model)
    for each in with_settings():
        each.settings_of(objective, params.get(each.name))
    if objective.reference(params.get("adapter")) is Reference.STEP:
        check_reference_step(settings, objective)


def check_reference_step(settings: TrainSettings, objective: Objective) -> None:
    """The training data are a reference step's, which scored the pairs as the loaders cut
    them."""
    data = settings.dataset_dict
    if isinstance(data, Step) and not getattr(type(data), "SCORES_REFERENCE", False):
        raise ConfigurationError(
            f"train.dataset_dict: objective {objective.name!r} compares the model with a "
            "reference: give the data through a catwalk::reference_logprobs step "
            "(lib.preference does), or give the model an adapter (its base with the adapter "
            "off is the reference)"
        )
    if isinstance(data, Step):
        check_same_cut(settings, data)


def check_same_cut(settings: TrainSettings, reference: Step) -> None:
    """The loaders cut the pairs as the reference step did (the same `max_length`), or a pair's
    log-probabilities would be compared with its reference's of other tokens."""
    scored = reference.kwargs.get("max_length")
    blocks = settings.blocks
    for loader in filter(None, (blocks.train_loader, blocks.validation_loader)):
        if scored is not None and loader.max_length != scored:
            raise ConfigurationError(
                f"{loader.collate_key('max_length')}: {loader.max_length}, and the reference "
                f"step '{reference.name}' scored the pairs with max_length {scored}: a pair cut "
                "otherwise would be compared with its reference's log-probabilities of other "
                "tokens; give both the same max_length"
            )
