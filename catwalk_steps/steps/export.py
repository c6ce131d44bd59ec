"""`catwalk::export_checkpoint`: any checkpoint as a model result, so that `catwalk::evaluate`
can score it (as `catwalk-export`, :mod:`catwalk_steps.commands.export`, writes it to a
directory). Training writes the model's config and tokenizer beside its checkpoints when it
starts, so exporting needs neither the hub nor the experiment file.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from tango import Step
from tango.common.exceptions import ConfigurationError

from ..checkpoints import (
    CheckpointError,
    model_from_checkpoint,
    read_manifest,
    resolve_checkpoint,
)
from ..scoring.rank_classifier import RankClassifier
from ..workspace.formats import HFModelFormat


@Step.register("catwalk::export_checkpoint")
class ExportCheckpoint(Step[RankClassifier]):
    """A training checkpoint (intermediate or final) as a rank classifier, stored as a Hugging
    Face directory like `catwalk::train`'s result, so `catwalk::evaluate` can score it.

    :param checkpoint: a checkpoint directory (`.../checkpoints/step000000400`), the `latest` or
        `best` pointer beside it (the checkpoint it names), or a step's work directory (its
        latest complete checkpoint). The same as `catwalk-export CHECKPOINT DIR`.

    The cache key includes the checkpoint's manifest, so a newer checkpoint at the same path is
    exported again.
    """

    VERSION = "001"
    DETERMINISTIC = True
    CACHEABLE = True
    FORMAT = HFModelFormat()

    @classmethod
    def massage_kwargs(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        kwargs = dict(kwargs)
        with contextlib.suppress(Exception):  # a bad path fails in run(), with its message
            resolved = resolve_checkpoint(Path(kwargs["checkpoint"]))
            kwargs["manifest"] = json.dumps(read_manifest(resolved), sort_keys=True)
        return kwargs

    def run(self, checkpoint: str, manifest: str | None = None) -> RankClassifier:  # type: ignore[override]
        try:
            return model_from_checkpoint(resolve_checkpoint(Path(checkpoint)))
        except CheckpointError as e:
            raise ConfigurationError(f"export_checkpoint.checkpoint: {e}") from None
