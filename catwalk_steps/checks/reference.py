"""Graph-build checks of `catwalk::train`'s `reference` (GRPO's frozen reference for a full
model, :mod:`catwalk_steps.training.reference`), one line each: given where nothing would use
it (another objective, beta 0) or where the reference is the base with the adapter off (a model
that trains an adapter), given a model block with an adapter of its own, and of another
tokenizer than the policy's (its log-probabilities would be of other tokens)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tango import Step
from tango.common.exceptions import ConfigurationError

from ..components import model_params
from ..objectives import Reference, objective_of
from ..settings import TrainSettings
from ..training.reference import given_block
from .preference import directory_tokenizer, step_tokenizer, tokenizers_differ

FIELD = "train.reference"


def check_reference(settings: TrainSettings) -> None:
    """`train.reference` where it is given (see the module)."""
    given = settings.reference
    if given is None:
        return
    params = model_params(settings.model)
    objective = objective_of(settings.model)
    adapter = params.get("adapter")
    reference = objective.reference(adapter, params.get(objective.name))
    if reference is Reference.ADAPTER_OFF:
        raise ConfigurationError(
            f"{FIELD}: the model trains an adapter, and its reference is its base with the "
            "adapter off; leave reference out (or train the whole model)"
        )
    if reference is not Reference.MODEL:
        raise ConfigurationError(
            f"{FIELD}: nothing would use it: only objective 'grpo' with beta > 0 compares the "
            f"model with a reference model, and the model's objective is {objective.name!r}"
            f"{' with beta 0' if objective.samples else ''}; leave reference out"
        )
    ours = policy_tokenizer(settings)
    theirs, what = reference_tokenizer(given, ours)
    if ours is not None and theirs is not None and tokenizers_differ(ours, theirs, FIELD):
        raise ConfigurationError(
            f"{FIELD}: {what} has tokenizer '{theirs}', and the policy's is '{ours}': the KL "
            "term compares the two models' log-probabilities of the same tokens; give a "
            "reference of the policy's tokenizer"
        )


def policy_tokenizer(settings: TrainSettings) -> str | None:
    """The policy's tokenizer: its block's, else `init_from`'s model's, else `pretrained`."""
    params = model_params(settings.model)
    start = settings.init_from
    if params.get("tokenizer") or start is None:
        return params.get("tokenizer") or params.get("pretrained")
    if isinstance(start, Step):
        return step_tokenizer(start)
    return directory_tokenizer(Path(str(start)).expanduser(), None)


def reference_tokenizer(given: Any, ours: str | None) -> tuple[str | None, str]:
    """The reference's tokenizer (None where it has none of its own: it takes the policy's),
    and what it is, for the message."""
    if isinstance(given, Step):
        return step_tokenizer(given), f"the model of step '{given.name}'"
    if isinstance(given, (str, Path)):
        directory = Path(str(given)).expanduser()
        if not directory.is_dir():
            raise ConfigurationError(f"{FIELD}: {directory}: no such model directory")
        return directory_tokenizer(directory, ours, FIELD), f"the model in {directory}"
    block = given_block(given)
    if block.get("adapter") is not None:
        raise ConfigurationError(
            f"{FIELD}.adapter: a reference is a whole frozen model; leave its adapter out"
        )
    return block.get("tokenizer") or block.get("pretrained"), "the reference's model block"
