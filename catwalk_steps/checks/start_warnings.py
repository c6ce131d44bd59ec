"""Lines logged when training starts: settings that work but are probably not what was meant
(more CPU processes than cores, answers cut by max_length, no checkpoint before the end), one
warning each; and which blocks a sharded engine wraps when its `modules_to_wrap` is left out."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..distributed.devices import usable_cores
from ..engines.skeleton import chosen_modules, model_skeleton
from ..engines.wrapping import describe_blocks
from ..kinds import kind_of
from ..settings import EngineSettings, LoaderSettings


def wrapping_note(engine: EngineSettings, model: Any) -> str | None:
    """Where `modules_to_wrap` is left out: which of the model's block classes become FSDP units
    (or are recomputed in backward), and how many; None when nothing is selected, or when the
    model cannot be built here. `engine`: the engine block, checked
    (:meth:`~catwalk_steps.settings.EngineSettings.check`)."""
    if engine.patterns is not None:
        return None
    names = chosen_modules(model, engine)  # the graph-build check's match, not a second one
    if not names:
        return None
    blocks = describe_blocks(model_skeleton(model), names)
    sharded, checkpointing = engine.shards, engine.activation_checkpointing
    roles = (["FSDP units"] if sharded else []) + (["recomputed"] if checkpointing else [])
    return (
        f"training_engine.modules_to_wrap: left out, so the model's blocks (its "
        f"_no_split_modules) are {' and '.join(roles)}: {blocks}"
    )


def schedule_warnings(schedule: Any) -> list[str]:
    """A schedule that writes no checkpoint before its end: a crash would start again at 0."""
    steps, every = schedule.train_steps, schedule.checkpoint_every
    if steps is None or every < steps:
        return []
    return [
        f"train.checkpoint_every: {every}, but the run has {steps} steps: no checkpoint is written "
        f"before the end, so a crash starts it again from step 0 (set checkpoint_every below "
        f"{steps}, e.g. to validate_every)"
    ]


def training_warnings(device_type: str, local_workers: int, step: str = "train") -> list[str]:
    """Settings that work but are probably not what was meant, one line each (`step`: whose
    keys, `train` or `evaluate`)."""
    warnings = []
    cores = usable_cores()
    if device_type == "cpu" and local_workers > cores:
        warnings.append(
            f"{step}.device_count: {local_workers} CPU processes on {cores} cores share them and "
            "slow each other down; use at most one process per core"
        )
    return warnings


def cut_answer_warnings(collated: Iterable[tuple[str | None, LoaderSettings, Any]]) -> list[str]:
    """Answers are scored whole only when they fit in the collate's max_length: say how many do
    not, per split, as counted when its tokens were stored (`collated`: each split, the loader
    that collates it and its :class:`~catwalk_steps.tokenized.StoredTokens`). A split without
    stored tokens (a collate of one's own, a stream) is not counted: no split is read whole
    here."""
    warnings = []
    for split, loader, tokens in collated:
        if split is not None and tokens is not None:
            counts = (tokens.prompts_cut, tokens.answers_cut)
            field = loader.collate_key("max_length")
            warnings += cut_lines(counts, tokens.rows, split, loader.max_length, field)
    return warnings


def cut_warnings(
    instances: Sequence[Any], tokenizer: Any, max_length: int, split: str, field: str
) -> list[str]:
    """What `max_length` (the key `field`) cuts of a split's instances, as their kind counts
    it: answers longer than it, and prompts whose start gives way to their answers (a step
    that scores every instance: the reference's log-probabilities; a stored split stays one,
    read row by row)."""
    kind = kind_of(instances)
    counts = (
        kind.prompts_cut(instances, tokenizer, max_length),
        kind.answers_cut(instances, tokenizer, max_length),
    )
    return cut_lines(counts, len(instances), split, max_length, field)


def cut_lines(
    counts: tuple[int, int], instances: int, split: str, max_length: int, field: str
) -> list[str]:
    """The warnings for (prompts cut, answers cut) of a split of `instances`."""
    prompts, answers = counts
    warnings = []
    if answers:
        warnings.append(
            f"{field}: {answers} of {instances} {split} instances have an answer longer than "
            f"fits in {max_length} tokens, which is cut (answers are otherwise scored whole); "
            "raise max_length"
        )
    if prompts:
        warnings.append(
            f"{field}: {prompts} of {instances} {split} instances have a prompt too long for "
            f"their answers to fit after it in {max_length} tokens: the prompt's start is cut "
            "(it keeps its last tokens, TRL's truncation_mode 'keep_end'; the answers are "
            "scored whole); raise max_length to keep it"
        )
    return warnings
