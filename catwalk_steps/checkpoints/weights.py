"""The model out of any checkpoint: its whole weights (whatever the engine), the files that
rebuild it without the hub, and the metric history it carries.

One loader serves the trained result of `catwalk::train`, `catwalk::export_checkpoint` and
`catwalk-export`: the weights of the checkpoint named, strictly no weight missing or left
over, into a model built with the history it carries (the checkpoint's own, or the one the
training step gives: the whole run's).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from ..adapters.registry import is_adapter_weight
from ..files import write_json_atomic
from ..scoring.rank_classifier import RankClassifier
from .base_identity import classifier_in
from .dcp_loading import whole_state
from .layout import (
    DCP_MODEL_DIR,
    MODEL_FILE,
    MODEL_FILES,
    MODEL_INFO,
    RUN_CARD_FILE,
    TRAINER_FILE,
    CheckpointError,
    checkpoints_root,
)
from .state import load_file


def tied_parameter_names(module: torch.nn.Module) -> set[str]:
    """State-dict names that share storage with an earlier name (e.g. GPT-2's lm_head/wte)."""
    seen: dict[int, str] = {}
    tied = set()
    for name, tensor in module.state_dict(keep_vars=True).items():
        pointer = tensor.data_ptr()
        if pointer in seen and tensor.numel() > 0:
            tied.add(name)
        else:
            seen.setdefault(pointer, name)
    return tied


def check_full_weights(model: torch.nn.Module, names: set[str], source: str) -> None:
    """Fails unless the state-dict `names` fit the model exactly.

    Only tied duplicates may be missing: they come back through the weight they share. (Tango
    loads final weights with `strict=False`, which would silently keep random weights.)
    """
    expected = set(model.state_dict())
    missing = expected - names - tied_parameter_names(model)
    unexpected = names - expected
    if missing or unexpected:
        raise CheckpointError(
            f"{source}: weights do not fit the model "
            f"(missing: {sorted(missing)[:5]}, unexpected: {sorted(unexpected)[:5]})"
        )


def check_adapter_weights(model: torch.nn.Module, names: set[str], source: str) -> None:
    """Fails unless the state-dict `names` are exactly the model's adapter weights."""
    expected = {name for name in model.state_dict() if is_adapter_weight(name)}
    if names != expected:
        kind = "the adapter's" if any(is_adapter_weight(n) for n in names) else "a whole model's"
        raise CheckpointError(
            f"{source}: holds {kind} weights, which do not fit this model's adapter "
            f"(missing: {sorted(expected - names)[:3]}, unexpected: {sorted(names - expected)[:3]})"
        )


def full_model_state(directory: Path) -> dict[str, torch.Tensor]:
    """The whole model's state dict from a checkpoint of any engine, on the CPU.

    Engines that consolidate at save time wrote `model.pt`; FSDP2 wrote a sharded
    torch.distributed.checkpoint directory, read here without a process group (its metadata
    and entries as data: :mod:`.dcp_loading`).
    """
    directory = Path(directory)
    if (directory / MODEL_FILE).is_file():
        return load_file(directory / MODEL_FILE)
    if (directory / DCP_MODEL_DIR).is_dir():
        return whole_state(directory / DCP_MODEL_DIR)
    raise CheckpointError(f"{directory}: no model weights ({MODEL_FILE} or {DCP_MODEL_DIR}/)")


# --- The model's own files: catwalk_model.json beside a config and a tokenizer ----------------


def write_model_info(
    directory: Path,
    objective: str,
    history: dict | None,
    run_card: dict | None = None,
    model: RankClassifier | None = None,
    dpo: dict | None = None,
) -> None:
    """`catwalk_model.json`: what a Hugging Face directory does not say about a rank classifier
    (its training objective), the run's metric history and its run card (None before training);
    beside an adapter's checkpoints, the adapter and the base it trains on (`base`: the model
    block without the adapter), from which exporting rebuilds the model; a model trained by DPO,
    its `dpo` settings (its rewards in an evaluation are scaled by its `beta`)."""
    info: dict[str, Any] = {
        "objective": objective,
        "metrics_history": history,
        "run_card": run_card,
    }
    if model is not None and model.adapter is not None:
        info["adapter"] = model.adapter.as_config()
        info["base"] = model.base_spec
    if dpo is not None:
        info["dpo"] = dpo
    write_json_atomic(Path(directory) / MODEL_INFO, info)


def read_model_info(directory: Path) -> dict[str, Any]:
    return json.loads((Path(directory) / MODEL_INFO).read_text())


def write_model_files(model: torch.nn.Module, work_dir: Path) -> None:
    """The rank classifier's config, tokenizer and objective, beside the checkpoints (rank 0,
    when training starts), so that exporting needs neither the hub nor the experiment file."""
    classifier = classifier_in(model)
    if classifier is None:
        return  # not a rank classifier: checkpoints still resume, export is not offered
    directory = checkpoints_root(work_dir) / MODEL_FILES
    directory.mkdir(parents=True, exist_ok=True)
    classifier.lm.config.save_pretrained(directory)
    classifier.tokenizer.save_pretrained(directory)
    write_model_info(directory, classifier.objective.name, None, model=classifier)


def checkpoint_history(checkpoint: Path) -> dict[str, Any] | None:
    """The metric history the run had recorded when it wrote this checkpoint."""
    trainer = load_file(Path(checkpoint) / TRAINER_FILE)
    states = trainer["ranks"][0]["callbacks"]  # by callback (older checkpoints: a list)
    for state in states.values() if isinstance(states, dict) else states:
        if isinstance(state, dict) and "history" in state:
            return state["history"]
    return None


def model_from_checkpoint(checkpoint: Path, model: RankClassifier | None = None) -> RankClassifier:
    """The rank classifier with the checkpoint's weights (every weight must fit; of an adapter
    run, every adapter weight, into the model built with its base).

    :param model: the model to load into, built with its run's history and card (from the
        experiment's config: `catwalk::train`'s result); by default it is rebuilt from the
        files written beside the checkpoints, without the hub, with the metric history the
        checkpoint holds and its run's card.
    """
    checkpoint = Path(checkpoint)
    if model is None:
        model = skeleton_from_model_files(
            checkpoint.parent / MODEL_FILES,
            metrics_history=checkpoint_history(checkpoint),
            run_card=run_card_of(checkpoint),
        )
    weights = full_model_state(checkpoint)
    if model.adapter is not None:  # the adapter's weights; the base is the model's own
        check_adapter_weights(model, set(weights), str(checkpoint))
        model.load_state_dict(weights, strict=False)
    else:
        check_full_weights(model, set(weights), str(checkpoint))
        model.load_state_dict(weights, strict=False, assign=True)  # tied duplicates may be absent
        model.lm.tie_weights()
    return model


def run_card_of(checkpoint: Path) -> dict[str, Any] | None:
    """The card the run wrote into its work directory when it started (None for a checkpoint
    outside one), with the checkpoint the model comes from."""
    path = Path(checkpoint).parent.parent / RUN_CARD_FILE  # <work dir>/checkpoints/stepN
    if not path.is_file():
        return None
    return {**json.loads(path.read_text()), "checkpoint": str(checkpoint)}


def skeleton_from_model_files(files: Path, **trained: Any) -> RankClassifier:
    """The model the files beside a run's checkpoints describe, without weights (an adapter's
    base: built whole from its source); `trained`: its `metrics_history` and `run_card`."""
    if not (files / "config.json").is_file():
        raise CheckpointError(
            f"{files}: missing (written when training starts; not a rank classifier's checkpoint?)"
        )
    info = read_model_info(files)
    if info.get("adapter") is not None:
        # The checkpoints hold the adapter alone: the base comes from its source, built whole.
        return RankClassifier(**info["base"], adapter=info["adapter"], **trained)
    return RankClassifier(
        pretrained=str(files), objective=info["objective"], skeleton=True, **trained
    )
