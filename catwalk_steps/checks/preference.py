"""Graph-build checks of a training step with `objective: 'dpo'`: its `dpo` settings (one line
for an unknown `loss_type`, `beta` <= 0, ...), and where its reference comes from: the data of a
`catwalk::reference_logprobs` step, or the model's own base with its adapter off."""

from __future__ import annotations

from tango import Step
from tango.common import Lazy
from tango.common.exceptions import ConfigurationError

from ..components import lazy_params
from ..scoring.rank_classifier import dpo_settings
from ..settings import OBJECTIVE, TrainSettings


def check_preference_training(settings: TrainSettings) -> None:
    model = settings.model
    params = lazy_params(model) if isinstance(model, Lazy) else {}
    objective = params.get("objective", OBJECTIVE)
    dpo_settings(objective if isinstance(objective, str) else OBJECTIVE, params.get("dpo"))
    if objective != "dpo" or params.get("adapter") is not None:
        return
    data = settings.dataset_dict
    if isinstance(data, Step) and not getattr(type(data), "SCORES_REFERENCE", False):
        raise ConfigurationError(
            "train.dataset_dict: objective 'dpo' compares the model with a reference: give the "
            "data through a catwalk::reference_logprobs step (lib.preference does), or give the "
            "model an adapter (its base with the adapter off is the reference)"
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
