"""`catwalk-plan`: what `tango run FILE` would run, said before it runs.

    catwalk-plan FILE [-o OVERRIDES] [--ext-var KEY=VALUE ...] [-w WORKSPACE] [-i PACKAGE ...]
                 [--json]

The experiment is read as `tango run` reads it (:mod:`..experiment`: the same settings, ext vars,
overrides and include packages, and the same one-line errors); printed are its resolved
configuration, then every step in the order the executor runs them
(:func:`..tango_fixes.executor.run_order`) with its name, type, unique id, whether the workspace
has its result (looked up, never read) and the devices it would lease
(:class:`..distributed.devices.Lease`, which a step with workers gives: `planned_lease`).
Building the graph is bookkeeping: no weight is loaded and no step runs. A local workspace that
does not exist is not created (every step would run).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from tango import Step

from ..components import registered_name
from ..distributed.devices import Lease, visible_gpu_count
from ..distributed.lease import SIMULATED_ENV, simulated_gpus
from ..errors import command_line
from ..experiment import Experiment, add_reading_arguments, read_experiment
from ..tango_fixes.executor import run_order

LOCAL_WORKSPACES = ("local", "catwalk::local")  # the types a directory names (tango.yml, -w)


@dataclass(frozen=True)
class PlannedStep:
    """One step as `tango run` would meet it. `state`: cached, runs, or (a step Tango never
    caches) runs each time a step that needs it runs."""

    name: str
    type: str
    unique_id: str
    state: str
    lease: Lease | None

    def as_data(self) -> dict[str, Any]:
        lease = self.lease
        devices = None
        if lease is not None:
            devices = {
                "text": lease.describe(),
                "workers": lease.plan.count,
                "device_type": lease.plan.device_type,
                "nodes": lease.nodes,
                "leases_from": list(lease.names) if lease.names is not None else None,
            }
        return {
            "name": self.name,
            "type": self.type,
            "unique_id": self.unique_id,
            "state": self.state,
            "devices": devices,
        }


def planned_steps(experiment: Experiment, workspace: Any | None) -> list[PlannedStep]:
    """The experiment's steps in the order the executor runs them."""
    graph = run_order(experiment.steps)
    leaves = graph.uncacheable_leaf_steps()
    found = []
    for step in graph.values():
        if not step.cache_results:
            state = "runs (never cached)" if step in leaves else "runs with the steps needing it"
        elif workspace is not None and step in workspace.step_cache:  # a look-up, nothing read
            state = "cached"
        else:
            state = "runs"
        planned = getattr(step, "planned_lease", None)  # a step with workers says which
        lease = planned() if callable(planned) else None
        kind = registered_name(Step, type(step)) or type(step).__name__
        found.append(PlannedStep(step.name, kind, step.unique_id, state, lease))
    return found


def local_directory(url: str | None, settings: Any) -> Path | None:
    """The directory of the local workspace `tango run` would use (`-w`, else tango.yml's), or
    None for another kind (as Tango's `LocalWorkspace.from_parsed_url` reads a URL)."""
    if url is not None:
        parsed = urlparse(url)
        if parsed.scheme not in ("", "local"):
            return None
        return Path(parsed.netloc) / parsed.path.lstrip("/") if parsed.netloc else Path(parsed.path)
    block = dict(settings.workspace or {})
    return Path(block["dir"]) if block.get("type") in LOCAL_WORKSPACES else None


def planned_workspace(url: str | None, settings: Any) -> tuple[Any | None, str]:
    """The workspace `tango run` would use and a line naming it; None where it would start
    empty (a directory not made yet, which is not made here, or Tango's memory workspace)."""
    from tango.workspace import Workspace

    directory = local_directory(url, settings)
    where = "-w" if url is not None else f"workspace in {settings.path or 'the default settings'}"
    if directory is not None and not directory.is_dir():
        return None, f"{directory.absolute()} ({where}; not made yet: every step would run)"
    if url is not None:
        return Workspace.from_url(url), f"{directory.absolute() if directory else url} ({where})"
    if settings.workspace is not None:
        named = directory.absolute() if directory else settings.workspace.get("type")
        return Workspace.from_params(dict(settings.workspace)), f"{named} ({where})"
    return None, "Tango's memory workspace (no -w, no workspace in settings: nothing cached)"


def node_line() -> str:
    """The devices this node leases to steps (:mod:`..distributed.lease`)."""
    gpus, simulated = visible_gpu_count(), simulated_gpus()
    line = f"This node: {gpus} GPU{'' if gpus == 1 else 's'} visible"
    if gpus == 0 and simulated is not None:
        line += f", {simulated} simulated ({SIMULATED_ENV}) that CPU workers lease"
    return line


def plan_text(experiment: Experiment, steps: list[PlannedStep], workspace: str) -> str:
    """The plan as a person reads it: the configuration, then one row per step (never cut)."""
    cached = sum(step.state == "cached" for step in steps)
    lines = [f"Configuration of {experiment.path} (resolved: ext vars, overrides):"]
    lines += [json.dumps(experiment.config, indent=2), ""]
    lines += [f"Workspace: {workspace}", node_line(), ""]
    lines.append(
        f"{len(steps)} steps, in the order tango run runs them: {cached} cached, "
        f"{len(steps) - cached} to run"
    )
    rows = [("step", "type", "unique id", "state", "devices")]
    for step in steps:
        devices = step.lease.describe() if step.lease is not None else "-"
        rows.append((step.name, step.type, step.unique_id, step.state, devices))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        lines.append(
            "  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        )
    notes = [(s.name, s.lease.plan.note) for s in steps if s.lease and s.lease.plan.note]
    lines += [f"{name}: {note}" for name, note in notes]
    return "\n".join(lines)


def plan(args: argparse.Namespace) -> str:
    """What the command prints."""
    experiment = read_experiment(
        args.experiment, args.overrides, args.ext_var, args.include_package
    )
    workspace, where = planned_workspace(args.workspace, experiment.settings)
    steps = planned_steps(experiment, workspace)
    if args.json:
        data: dict[str, Any] = {"experiment": str(experiment.path), "workspace": where}
        data.update(config=experiment.config, steps=[step.as_data() for step in steps])
        return json.dumps(data, indent=2)
    return plan_text(experiment, steps, where)


def parser() -> argparse.ArgumentParser:
    """The command's arguments (docs/reference/cli.md is generated from them)."""
    parser = argparse.ArgumentParser(
        prog="catwalk-plan",
        description=(
            "What `tango run FILE` would run, without running it: the resolved configuration, "
            "then every step in the order tango run runs them, with its type, unique id, "
            "whether the workspace has it cached, and the devices it would lease. The file is "
            "read as tango run reads it (tango.yml, its ext vars, -o, -i); no step runs and no "
            "weight is loaded."
        ),
    )
    parser.add_argument("experiment", metavar="FILE", type=Path, help="the experiment file")
    parser.add_argument(
        "-o",
        "--overrides",
        metavar="JSON",
        help="fields to override, as tango run's -o: a JSON(NET) object of dotted keys, e.g. "
        """'{"steps.trained.train_steps": 4}' (default: none)""",
    )
    add_reading_arguments(parser, "a jsonnet external variable, as tango run's")
    parser.add_argument(
        "-w",
        "--workspace",
        metavar="DIR",
        help="the workspace whose cached results count, as tango run's -w (default: "
        "tango.yml's); a directory that does not exist is not made",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the plan as one JSON object instead (default: a table after the config)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    args = parser().parse_args(argv)
    return command_line("catwalk-plan", lambda: plan(args))


if __name__ == "__main__":
    sys.exit(main())
