"""Graph-build checks of the models a training step compares or starts from (a DPO reference,
`init_from`: DPO after SFT): of the policy's tokenizer, or its token ids would be rows of
another vocabulary. (The objective's own checks: :mod:`.objective`.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tango import Step
from tango.common.exceptions import ConfigurationError

from ..components import model_params
from ..remote import is_hub_name
from ..scoring.tokenization import load_tokenizer

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


def tokenizers_differ(ours: str, theirs: str, field: str) -> tuple[int, int] | None:
    """(our size, their size) when two tokenizers (names or directories) give other ids (their
    vocabularies or special tokens differ); None when they are the same. A hub tokenizer that
    cannot be read here is left to the step's own load."""
    if ours == theirs:
        return None
    try:
        one, other = load_tokenizer(ours, field), load_tokenizer(theirs, field)
    except ConfigurationError:
        if is_hub_name(ours) or is_hub_name(theirs):
            return None
        raise
    if one.get_vocab() == other.get_vocab() and one.all_special_tokens == other.all_special_tokens:
        return None
    return len(one), len(other)


def check_same_tokenizer(reference: str, policy: str | None, field: str) -> None:
    """The reference tokenizes the answers as the policy does (the same vocabulary and special
    tokens), or the log-probabilities are of other tokens: one line."""
    if policy is not None and tokenizers_differ(reference, policy, field):
        raise ConfigurationError(
            f"{field}: the reference's tokenizer '{reference}' differs from the policy's "
            f"'{policy}'; DPO compares the two models' log-probabilities of the same tokens: "
            "give a reference with the policy's tokenizer"
        )


def check_init_from(init_from: Any, tokenizer: str | None) -> None:
    """`init_from`'s model is of the model block's tokenizer (`tokenizer`; left out, the block
    takes init_from's own): a model of another vocabulary would train, silently, on token ids
    that mean other tokens, and be saved under the block's tokenizer."""
    if init_from is None:
        return
    if isinstance(init_from, Step):
        theirs, what = step_tokenizer(init_from), f"the model of step '{init_from.name}'"
    else:
        directory = Path(str(init_from)).expanduser()
        if not directory.is_dir():
            raise ConfigurationError(f"train.init_from: {directory}: no such model directory")
        theirs, what = directory_tokenizer(directory, tokenizer), f"the model in {directory}"
    if tokenizer is None or theirs is None:
        return
    sizes = tokenizers_differ(tokenizer, theirs, "train.init_from")
    if sizes is not None:
        raise ConfigurationError(
            f"train.init_from: {what} has tokenizer '{theirs}' ({sizes[1]:,} tokens), and the "
            f"model block's is '{tokenizer}' ({sizes[0]:,}): its embeddings are rows of "
            "another vocabulary; give the block the tokenizer of the model it starts from"
        )


def step_tokenizer(step: Step) -> str | None:
    """The tokenizer a model step's model was trained with: its block's (`tokenizer`, else what
    it starts from, else `pretrained`); None for a step without a model block."""
    model = getattr(step, "kwargs", {}).get("model")
    params = model_params(model)
    if params.get("tokenizer"):
        return params["tokenizer"]
    start = step.kwargs.get("init_from")
    if isinstance(start, Step):
        return step_tokenizer(start)
    if start is not None:
        return directory_tokenizer(Path(str(start)).expanduser(), None)
    return params.get("pretrained")


def directory_tokenizer(
    directory: Path, tokenizer: str | None, field: str = "train.init_from"
) -> str | None:
    """A model directory's own tokenizer (None when it holds none); with none, its config's
    vocabulary must be one the block's `tokenizer` can index: not smaller, nor more than twice
    its size (a vocabulary padded for speed adds a few hundred rows, not another tokenizer's)."""
    if any((directory / name).is_file() for name in TOKENIZER_FILES):
        return str(directory)
    config = directory / "config.json"
    size = json.loads(config.read_text()).get("vocab_size") if config.is_file() else None
    if tokenizer is not None and isinstance(size, int):
        ours = len(load_tokenizer(tokenizer, "model.tokenizer"))
        if not ours <= size <= 2 * ours:
            raise ConfigurationError(
                f"{field}: the model in {directory} has a vocabulary of {size:,} "
                f"tokens, and the model block's tokenizer '{tokenizer}' has {ours:,}: it is a "
                "model of another tokenizer; give the block that tokenizer (or the directory "
                "its tokenizer files)"
            )
    return None
