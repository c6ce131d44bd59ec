"""`wandb::log` in `catwalk::train` (also named `catwalk::wandb`): the run's metric history in
one Weights & Biases run per training step, written by rank 0.

Why not Tango's own `wandb::log` callback as it is: it starts a W&B run on every rank (one per
rank, "(rank 1)", ...), logs only the loss, learning rate and the one validation metric under its
own names, and never passes `resume` to W&B, so a resumed step starts a second run with the same
id. This one takes the same keys (`project`, `entity`, `group`, `name`, `notes`, `tags`,
`watch_model`, `wandb_config`, plus `mode`), and:

- one run per training step, whatever the engine and device count: rank 0 logs, others do nothing;
- every history entry by its name (:mod:`.base`), the run card as the run's config;
- a resumed step continues the same run: its id is kept in the work directory; online, W&B says
  which steps it holds (`resume="allow"`); offline, the earlier offline segments of the run on
  disk say it (W&B writes its log in 32 KiB blocks, so a killed run keeps only whole blocks); the
  steps after that come from the restored history, then from training, each once. Offline
  segments are uploaded in order with `wandb sync` and `wandb sync --append`.
"""

from __future__ import annotations

import configparser
import contextlib
import json
import netrc
import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tango.integrations.torch import TrainCallback

from ...checkpoints.layout import RUN_CARD_FILE
from ...files import write_json_atomic
from ...remote import unanswered
from .base import Tracker, TrackerError

RUN_ID_FILE = "wandb_run.json"  # in the work directory: the W&B run this step logs to
INIT_TIMEOUT_S = 60.0  # W&B's own bound on starting a run once its server has answered
OFFLINE_MODES = ("offline", "dryrun", "disabled")


def wandb_mode(mode: str | None) -> str:
    """The mode W&B will run in: the callback's `mode`, else `WANDB_MODE` (or
    `WANDB_DISABLED`), else what `wandb offline` / `wandb online` saved in W&B's settings
    files (the working directory's, then the user's), else online."""
    if mode:
        return mode
    if os.environ.get("WANDB_DISABLED", "").lower() in ("true", "1"):
        return "disabled"
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    config_dir = Path(os.environ.get("WANDB_CONFIG_DIR", Path.home() / ".config" / "wandb"))
    for settings in (Path.cwd() / "wandb" / "settings", config_dir / "settings"):
        parser = configparser.ConfigParser()
        with contextlib.suppress(OSError, configparser.Error):
            parser.read(settings)
            if parser.has_option("default", "mode"):
                return parser.get("default", "mode")
    return "online"


def check_server_answers() -> None:
    """Online, W&B retries an unanswered server for ever (login's key check, then the run):
    ask it once, with a short timeout, and fail in one line when it does not answer."""
    url = os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai").rstrip("/")
    reason = unanswered(url)
    if reason is not None:
        raise TrackerError(
            f"wandb::log: the W&B server ({url}) is unreachable ({reason}); log offline with "
            "mode: 'offline' (or WANDB_MODE=offline) and upload later with `wandb sync`"
        )


def wandb_api_key_found() -> bool:
    """Whether W&B will find credentials: `WANDB_API_KEY`, an identity token file, or the
    entry `wandb login` writes to ~/.netrc (or `NETRC`) for the W&B host."""
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    host = urlsplit(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname
    path = os.environ.get("NETRC") or Path.home() / ".netrc"
    try:
        return netrc.netrc(str(path)).authenticators(host or "") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def offline_steps_on_disk(wandb_dir: Path, run_id: str) -> int:
    """The last history step that earlier offline segments of `run_id` hold on disk.

    Private: reads W&B's transaction log with W&B's own reader (`wandb.sdk.internal.datastore`,
    checked against wandb 0.26.1), as `wandb sync` would; the incomplete last block of a killed
    run is where reading stops.
    """
    from wandb.proto import wandb_internal_pb2
    from wandb.sdk.internal import datastore

    last = 0
    # offline-run-<time>-<id>, with "-1", "-2", ... when two segments start in the same second
    segment = re.compile(rf"offline-run-\d{{8}}_\d{{6}}-{re.escape(run_id)}(-\d+)?")
    paths = [p for p in wandb_dir.glob(f"offline-run-*/run-{run_id}.wandb")]
    for path in sorted(p for p in paths if segment.fullmatch(p.parent.name)):
        store = datastore.DataStore()
        try:
            store.open_for_scan(str(path))
            while (data := store.scan_data()) is not None:
                # Generated protobuf: wandb's stub does not declare its messages.
                record = wandb_internal_pb2.Record()  # type: ignore[attr-defined]
                record.ParseFromString(data)
                if record.WhichOneof("record_type") == "history":
                    last = max(last, record.history.step.num)
        except (AssertionError, OSError, ValueError):
            continue  # a torn block: what came before it counts
    return last


def run_id_of(work_dir: Path) -> str:
    """A training step's W&B run: the one it started before, else a new one (kept from now
    on, also for the checkpoint scores logged into it later: :mod:`.wandb_backfill`)."""
    import wandb

    path = Path(work_dir) / RUN_ID_FILE
    if path.is_file():
        return json.loads(path.read_text())["id"]
    run_id = wandb.util.generate_id()
    write_json_atomic(path, {"id": run_id})
    return run_id


@TrainCallback.register("catwalk::wandb")
class WandbTracker(Tracker):
    """Logs the run's metric history to Weights & Biases from rank 0 (see the module docstring).

    :param project: W&B project (default: W&B's, or the `wandb` workspace's).
    :param entity: W&B entity (user or team).
    :param group: default: the step's unique id.
    :param name: the run's name; default: the step's name.
    :param mode: "online", "offline" or "disabled"; default: `WANDB_MODE`, else online.
    :param watch_model: `wandb.watch` the model (DDP only: sharded ranks hold shards).
    :param wandb_config: more entries for the run's config (beside the run card).
    """

    def __init__(
        self,
        *args: Any,
        project: str | None = None,
        entity: str | None = None,
        group: str | None = None,
        name: str | None = None,
        notes: str | None = None,
        tags: list[str] | None = None,
        mode: str | None = None,
        watch_model: bool = False,
        wandb_config: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        workspace_project = getattr(self.workspace, "project", None)  # Tango's `wandb` workspace
        self.init_kwargs: dict[str, Any] = {
            "project": project or workspace_project,
            "entity": entity or getattr(self.workspace, "entity", None),
            "group": group or self.step_id,
            "name": name or self.step_name or "train",
            "notes": notes,
            "tags": tags,
            "job_type": "train",
        }
        self.mode = wandb_mode(mode)
        self.watch_model = watch_model
        self.extra_config = dict(wandb_config or {})
        self.run: Any = None

    def open(self) -> int:
        import wandb

        work_dir = Path(self.work_dir)
        work_dir.mkdir(parents=True, exist_ok=True)
        run_id = self.run_id(work_dir)
        offline = self.mode in OFFLINE_MODES
        if not offline:
            check_server_answers()
        self.run = wandb.init(
            id=run_id,
            dir=str(work_dir),
            mode=self.mode,  # type: ignore[arg-type]  # wandb's annotation leaves out 'dryrun'
            config=self.config(),
            resume=None if offline else "allow",
            settings=wandb.Settings(init_timeout=INIT_TIMEOUT_S),
            **self.init_kwargs,
        )
        if self.watch_model:
            self.run.watch(self.training_engine.model)
        if self.mode == "disabled":
            return 0
        if offline:
            return offline_steps_on_disk(work_dir / "wandb", run_id)
        return max(0, int(self.run.starting_step) - 1)

    def run_id(self, work_dir: Path) -> str:
        return run_id_of(work_dir)

    def config(self) -> dict[str, Any]:
        card_path = Path(self.work_dir) / RUN_CARD_FILE
        card = json.loads(card_path.read_text()) if card_path.is_file() else {}
        train = {k: v for k, v in self.train_config.as_dict().items() if k != "worker_id"}
        return {**card, "train_config": train, **self.extra_config}

    def write(self, step: int, row: dict[str, float]) -> None:
        self.run.log(row, step=step, commit=True)

    def close(self) -> None:
        self.run.finish()
