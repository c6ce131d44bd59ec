"""Where results live: the workspace several jobs share (:mod:`.shared`), its step cache with
one-line errors for damaged results and one loaded model per process (:mod:`.step_cache`), and
how each result is stored, as data (:mod:`.formats`)."""

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
