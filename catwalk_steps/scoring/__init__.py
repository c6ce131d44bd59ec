"""How a causal LM answers a multiple-choice question: tokenizing (context, choice) pairs as
lm-evaluation-harness does, the rank classifier over any Hugging Face causal LM, the float32
arithmetic of log-probabilities and metrics, and scoring a whole split; and how it answers a
generation request (greedy decoding with a cache, continuous batching, the answers scored).

Pure model-and-data code: nothing here knows of devices, ranks or process groups.
"""

from .choices import metrics_from_scores, model_max_length, score_choices, task_metrics
from .collate import MultipleChoiceCollator
from .generated import generate_texts, generation_metrics, generation_outputs
from .precision import Precision
from .rank_classifier import RankClassifier
from .sequences import SequenceEncoder

__all__ = [
    "MultipleChoiceCollator",
    "Precision",
    "RankClassifier",
    "SequenceEncoder",
    "generate_texts",
    "generation_metrics",
    "generation_outputs",
    "metrics_from_scores",
    "model_max_length",
    "score_choices",
    "task_metrics",
]
