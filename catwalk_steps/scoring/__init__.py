"""How a causal LM answers a multiple-choice question: tokenizing (context, choice) pairs as
lm-evaluation-harness does, the rank classifier over any Hugging Face causal LM, the float32
arithmetic of log-probabilities, and scoring a whole split; and how it answers a generation
request (greedy decoding with a cache, continuous batching), or samples completions for
reinforcement learning (:mod:`.sampling`, :mod:`.rollouts`). What each kind of task makes of
the answers (its metrics): :mod:`catwalk_steps.kinds`.

Pure model-and-data code: nothing here knows of devices, ranks or process groups.
"""

from .choices import model_max_length, score_choices
from .generated import generate_texts
from .rank_classifier import RankClassifier
from .sequences import SequenceEncoder

__all__ = [
    "RankClassifier",
    "SequenceEncoder",
    "generate_texts",
    "model_max_length",
    "score_choices",
]
