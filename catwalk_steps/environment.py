"""The environment of this process, as a run card records it: Python's and the packages'
versions, the git commit of the code, and the host (CPU, cores, GPUs), collected without
touching the GPUs: GPU names come from `nvidia-smi`, so the process that launches workers never
creates a CUDA context of its own. (:mod:`catwalk_steps.reports.run_card` shows it.)"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("torch", "transformers", "ai2-tango", "catwalk_steps", "fairscale")
OPTIONAL_PACKAGES = ("wandb", "tensorboard")


def versions() -> dict[str, str | None]:
    """Python's and the packages' versions (optional ones only when installed)."""
    found: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES + OPTIONAL_PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            if name in PACKAGES:
                found[name] = None
    return found


def run_git(directory: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(directory), *args], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def git_state(directory: Path | None = None) -> dict[str, Any]:
    """The commit of the repository holding the code (this package's, else the working
    directory's) and whether its tree had changes (untracked files included)."""
    package_dir = Path(__file__).resolve().parents[1]
    for candidate in [directory] if directory else [package_dir, Path.cwd()]:
        commit = run_git(candidate, "rev-parse", "HEAD")
        if commit:
            status = run_git(candidate, "status", "--porcelain")
            return {
                "commit": commit.strip(),
                "dirty": None if status is None else bool(status.strip()),
                "repository": str(candidate),
            }
    return {"commit": None, "dirty": None, "repository": None}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpus() -> list[dict[str, Any]]:
    """The machine's NVIDIA GPUs (name, memory), from `nvidia-smi`; none when it is absent."""
    if shutil.which("nvidia-smi") is None:
        return []
    query = ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"]
    try:
        out = subprocess.run(query, capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    found = []
    for line in out.strip().splitlines():
        name, _, memory = line.rpartition(",")
        if name:
            found.append({"name": name.strip(), "memory_mib": int(float(memory))})
    return found


def host() -> dict[str, Any]:
    return {
        "hostname": platform.node(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "gpus": gpus(),
    }


def environment() -> dict[str, Any]:
    """Versions, git state and host of this process."""
    return {"versions": versions(), "git": git_state(), "host": host()}
