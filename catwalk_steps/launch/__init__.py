"""Starting the workers of a training job: this node's processes (:mod:`.launcher`), what runs
in each (:mod:`.worker_process`), and the other nodes of a multi-node job (:mod:`.nodes`,
`catwalk-worker`)."""

from .launcher import WorkerFailed, run_job, run_training, start_worker_server
from .worker_process import RendezvousError

__all__ = ["RendezvousError", "WorkerFailed", "run_job", "run_training", "start_worker_server"]
