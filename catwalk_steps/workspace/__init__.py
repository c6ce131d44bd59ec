"""Where results live: the workspace several jobs share (:mod:`.shared`), its step cache with
one-line errors for damaged results (:mod:`.step_cache`), the one model a process holds
(:mod:`.held_model`), and how each result is stored, as data (:mod:`.formats`)."""

from .formats import EvaluationFormat, HFModelFormat, InstancesFormat, PlainJsonFormat
from .directory import check_writable
from .shared import SharedLocalWorkspace

__all__ = [
    "EvaluationFormat",
    "HFModelFormat",
    "InstancesFormat",
    "PlainJsonFormat",
    "SharedLocalWorkspace",
    "check_writable",
]
