"""Helpers shared by the benchmarks: the demo's model spec and writing results."""

from __future__ import annotations

import json
import platform
from pathlib import Path

import torch
from tango.common.params import Params

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"


def demo_model_spec() -> dict:
    """The model block of experiments/demo.jsonnet, so the benchmark runs what users run."""
    steps = Params.from_file(REPO / "experiments" / "demo.jsonnet").as_dict()["steps"]
    spec = dict(steps["trained"]["model"])
    spec.pop("type")
    return spec


def machine() -> dict:
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
    }


def write_results(name: str, payload: dict, markdown: str) -> None:
    """bench/results/<name>.json and .md; the README quotes the markdown."""
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(payload, indent=2) + "\n")
    (RESULTS / f"{name}.md").write_text(markdown)
    print(markdown)
