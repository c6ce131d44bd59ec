"""Experiment trackers fed by the run's metric history: Weights & Biases (`wandb::log`, also
`catwalk::wandb`) and TensorBoard (`catwalk::tensorboard`). Neither library is imported until
a tracker opens, on rank 0: both are optional (`pip install 'catwalk_steps[trackers]'`)."""

from ...checkpoints.layout import RUN_CARD_FILE
from .base import Tracker, TrackerError, connect_trackers
from .tensorboard import TensorBoardTracker
from .wandb import WandbTracker

# `wandb::log` names Tango's callback; `catwalk::train` runs this one in its place (see .wandb).
TRACKER_ALIASES = {"wandb::log": "catwalk::wandb"}

__all__ = [
    "RUN_CARD_FILE",
    "TRACKER_ALIASES",
    "TensorBoardTracker",
    "Tracker",
    "TrackerError",
    "WandbTracker",
    "connect_trackers",
]
