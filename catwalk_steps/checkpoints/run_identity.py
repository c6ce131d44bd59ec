"""What a checkpoint was trained on: its training data and its model's shape, in its manifest.

Resuming loads the checkpoint's weights, optimizer and position in the data into this run: a
checkpoint of another model fails deep in `load_state_dict` ("Error(s) in loading state_dict");
one trained on other data loads without a word and goes on as if it had seen this data. Each
checkpoint's manifest records both, and a run that would resume from it compares them with its
own before any worker starts (the model already when the step graph is built), refusing a
mismatch in one line naming the two.

The data is the training split's SHA-256 (:func:`~catwalk_steps.tasks.dataset_fingerprint`,
computed when the split was stored), not the task's name or config: the same task
loaded with other sizes or files is other data, and a run that only adds a validation split
or an in-loop task trains on the same data. The model is the name and shape of each of its
parameters (an adapter's included), as its meta-device skeleton has them: what a checkpoint's
state must fit. A manifest written before these were recorded has neither: nothing is compared.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..kinds.stored import split_fingerprint
from ..tasks.streamed import is_streamed


def data_identity(data: Any, split: str, task: str) -> dict[str, Any]:
    """The training data of a run: its task's name, the split, its size and its SHA-256 (a
    stored split's, computed when it was written: no row is read; a streamed split's: of what
    identifies the stream, its size unknown: None)."""
    instances = data[split]
    return {
        "task": task,
        "split": split,
        "instances": None if is_streamed(instances) else len(instances),
        "sha256": split_fingerprint(instances, split),
    }


def model_identity(skeleton: Any) -> dict[str, Any] | None:
    """The class of a rank classifier's language model and the shape of each of its parameters
    (None when the skeleton could not be built here)."""
    if skeleton is None:
        return None
    shapes = {name: list(p.shape) for name, p in skeleton.named_parameters()}
    lm = getattr(skeleton, "lm", skeleton)
    return {"class": type(lm).__name__, "shapes": shapes}


def identity_problem(checkpoint: Path, manifest: dict, current: dict[str, Any]) -> str | None:
    """Why the checkpoint was trained on other data or another model than `current` (`data`,
    `model`: either may be absent, then not compared), or None."""
    recorded_data, data = manifest.get("data"), current.get("data")
    if isinstance(recorded_data, dict) and data and recorded_data.get("sha256") != data["sha256"]:
        return (
            f"{checkpoint}: trained on {describe_data(recorded_data)}, but this run trains on "
            f"{describe_data(data)}; resume from a checkpoint trained on this data, or train "
            "without resume_from"
        )
    recorded_model, model = manifest.get("model"), current.get("model")
    if isinstance(recorded_model, dict) and model and recorded_model != model:
        return (
            f"{checkpoint}: holds {describe_model(recorded_model)}, but this run trains "
            f"{describe_model(model)}{first_difference(recorded_model, model)}; resume from a "
            "checkpoint of this model, or train without resume_from"
        )
    return None


def describe_data(data: dict) -> str:
    size = "streamed" if data.get("instances") is None else f"{data.get('instances')} instances"
    return (
        f"task '{data.get('task')}' (split '{data.get('split')}': {size}, SHA-256 "
        f"{str(data.get('sha256'))[:12]})"
    )


def describe_model(model: dict) -> str:
    shapes = model.get("shapes") or {}
    count = sum(_numel(shape) for shape in shapes.values())
    return f"a {model.get('class')} of {count:,} parameters in {len(shapes)} tensors"


def first_difference(then: dict, now: dict) -> str:
    """The first parameter whose shape differs, or that one of the two lacks."""
    before, after = then.get("shapes") or {}, now.get("shapes") or {}
    for name in [*after, *(n for n in before if n not in after)]:
        if before.get(name) != after.get(name):
            there = before.get(name, "absent")
            here = after.get(name, "absent")
            return f" ({name}: {there} there, {here} here)"
    return ""


def _numel(shape: Any) -> int:
    count = 1
    for size in shape if isinstance(shape, list) else []:
        count *= int(size)
    return count
