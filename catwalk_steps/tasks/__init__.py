"""Multiple-choice tasks and where they come from.

A task turns a source (the Hugging Face hub, files on disk, or a seed) into splits of
:class:`MultipleChoiceInstance`. Every source goes through the same row parser, so the hub and the
local path validate data the same way, and bad data fails with one line that names the file, the
line and the field.
"""

from .base import MultipleChoiceInstance, Task, TaskDataError, dataset_fingerprint
from .piqa import PiqaTask, piqa_instance, read_piqa_files
from .synthetic import SyntheticTask

__all__ = [
    "MultipleChoiceInstance",
    "PiqaTask",
    "SyntheticTask",
    "Task",
    "TaskDataError",
    "dataset_fingerprint",
    "piqa_instance",
    "read_piqa_files",
]
