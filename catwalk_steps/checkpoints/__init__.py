"""Checkpoints that survive a crash, and the model in them: the one home of the format.

- :mod:`.layout`: the names of every file and directory, the pointers;
- :mod:`.manifest`: complete only once `COMPLETE.json` lists every file;
- :mod:`.discovery`: which checkpoint to resume from, which one is the result, which one a user
  names;
- :mod:`.state`: a checkpoint file read as data, the random generators (what the loop writes
  and reads on every rank: :mod:`catwalk_steps.training.checkpointing`);
- :mod:`.weights`: the whole model out of any engine's checkpoint (of an adapter run: the
  adapter, onto the base built from its source), and the model's own files;
- :mod:`.base_identity`: the base an adapter checkpoint was trained on, checked on resume.
- :mod:`.run_identity`: the training data and the model's shape a checkpoint was trained on,
  checked before a run resumes from it.
"""

from .discovery import (
    best_checkpoint,
    check_resumable,
    complete_checkpoints,
    latest_checkpoint,
    resolve_checkpoint,
    resumable_checkpoints,
    resume_candidates,
)
from .layout import CheckpointError, checkpoint_dir, checkpoints_root
from .manifest import problem_with, read_manifest
from .weights import full_model_state, model_from_checkpoint

__all__ = [
    "CheckpointError",
    "best_checkpoint",
    "check_resumable",
    "checkpoint_dir",
    "checkpoints_root",
    "complete_checkpoints",
    "full_model_state",
    "latest_checkpoint",
    "model_from_checkpoint",
    "problem_with",
    "read_manifest",
    "resolve_checkpoint",
    "resumable_checkpoints",
    "resume_candidates",
]
