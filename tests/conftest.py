"""Shared test helpers: tiny models, PIQA files written on the fly, and `tango run` in a
temporary workspace."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXPERIMENTS = REPO / "experiments"
LIBRARY = REPO / "catwalk_steps" / "jsonnet" / "lib"  # `import 'lib/pipeline.libsonnet'`

TINY_GPT2 = {
    "model_type": "gpt2",
    "n_layer": 2,
    "n_embd": 32,
    "n_head": 2,
    "n_positions": 128,
    "resid_pdrop": 0.0,
    "embd_pdrop": 0.0,
    "attn_pdrop": 0.0,
    "activation_function": "gelu_pytorch_tanh",
}
TINY_MODEL = {
    "type": "catwalk::rank_classifier",
    "config": TINY_GPT2,
    "tokenizer": "catwalk::byte_level",
}

# The demo (experiments/demo.jsonnet) as small as it runs: one process, two steps.
TINY_DEMO = {
    "steps.data.task.sizes": {"train": 16, "validation": 8},
    "steps.trained.device_count": 1,
    "steps.trained.train_steps": 2,
    "steps.trained.validate_every": 2,
    "steps.trained.checkpoint_every": 2,
}

# A question-answer task of `{"q": ..., "a": ...}` rows (the tests' generative files): each test
# adds its data_files and what it needs besides.
QA_TASK = {
    "type": "catwalk::generative",
    "name": "pairs",
    "source": "files",
    "doc_to_text": "Q: {{q}}\nA:",
    "doc_to_target": "{{a}}",
    "until": ["\n"],
    "max_gen_toks": 6,
}

PIQA_ROWS = [
    {"goal": "Keep bread fresh", "sol1": "Seal it in a bag.", "sol2": "Leave it in the sun."},
    {"goal": "Open a jar", "sol1": "Hit it with a feather.", "sol2": "Twist the lid hard."},
    {
        "goal": "Dry wet shoes",
        "sol1": "Stuff them with newspaper.",
        "sol2": "Fill them with water.",
    },
    {"goal": "Cool soup", "sol1": "Stir it and wait.", "sol2": "Put it on the stove."},
]
PIQA_LABELS = [0, 1, 0, 0]


def write_piqa(directory: Path, stem: str, rows=PIQA_ROWS, labels=PIQA_LABELS) -> Path:
    """PIQA's distribution files: `<stem>.jsonl` and `<stem>-labels.lst`."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{stem}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (directory / f"{stem}-labels.lst").write_text("".join(f"{label}\n" for label in labels))
    return directory


@pytest.fixture
def piqa_dir(tmp_path: Path) -> Path:
    """A small PIQA copy on disk with train and valid splits (synthetic but PIQA-shaped)."""
    rows = PIQA_ROWS * 4
    labels = PIQA_LABELS * 4
    write_piqa(tmp_path / "piqa", "train", rows, labels)
    return write_piqa(tmp_path / "piqa", "valid", rows[:8], labels[:8])


def tango_command(
    experiment: Path, workspace: Path, name: str, overrides: dict | None = None, *extra: str
) -> list[str]:
    """`tango run` as a user types it, with the test helpers' package included."""
    command = [
        str(Path(sys.executable).with_name("tango")),
        "--log-level",
        "info",
        "--file-friendly-logging",
        "run",
        str(experiment),
        "-w",
        str(workspace),
        "-i",
        "catwalk_steps",
        "-i",
        "tests.training",
        "-n",
        name,
        *extra,
    ]
    if overrides:
        command += ["-o", json.dumps(overrides)]
    return command


# One torch thread per process: the tests' models are tiny, and with two pytest-xdist workers
# (`make test`) on two cores, threads spin-waiting on each other cost more than they compute.
TANGO_ENV = {
    **os.environ,
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONPATH": str(REPO),
    "OMP_NUM_THREADS": "1",
}


def run_tango(
    experiment: Path,
    workspace: Path,
    name: str,
    overrides: dict | None = None,
    timeout: int = 600,
    extra: tuple[str, ...] = (),
    fresh: bool = False,
    env: dict | None = None,
) -> str:
    """Runs `tango run` as a user would and returns its output; fails the test on error.

    `extra`: more `tango run` arguments (`--ext-var seeds=1,2`, `--parallelism 2`, ...).
    `fresh`: in a new interpreter, as the installed script (else forked: tests/commands.py).
    """
    from . import commands

    command = tango_command(experiment, workspace, name, overrides, *extra)
    done = commands.run(command, timeout, env=env, fresh=fresh)
    output = done.stdout + done.stderr
    if done.returncode != 0:
        raise AssertionError(f"tango run failed ({done.returncode}):\n{output[-6000:]}")
    return output


def killed_and_rerun(
    experiment: Path, workspace: Path, overrides: dict, step: str, resumed_at: int
) -> str:
    """`tango run -s step` with a fault that kills rank 1 (`test::faults`), then the same run
    again: the rerun's output, which says it resumed at step `resumed_at`."""
    from . import commands

    argv = tango_command(experiment, workspace, "first", overrides, "-s", step)
    first = commands.run(argv, timeout=300)
    assert first.returncode != 0, first.stdout[-3000:]
    assert "rank 1 died: killed by SIGKILL" in first.stdout + first.stderr
    output = run_tango(experiment, workspace, "rerun", overrides, extra=("-s", step))
    assert "Resumed from" in output and f"at step {resumed_at}" in output, output[-3000:]
    return output


def step_result(workspace: Path, run_name: str, step_name: str) -> Path:
    """Where a step of a finished run keeps its result."""
    from catwalk_steps.workspace.shared import SharedLocalWorkspace  # its records are JSON

    run = SharedLocalWorkspace(workspace).registered_run(run_name)
    return Path(run.steps[step_name].result_location)


PARITY = REPO / "tests" / "fixtures" / "engines_parity.jsonnet"


MAIN_JOB_OUTPUT = "make_run_output.txt"  # beside main_job_run's workspace


@pytest.fixture(scope="session")
def main_job_run(tmp_path_factory) -> Path:
    """`make run`'s experiment as shipped (demo_fsdp.jsonnet), run "first" in a workspace that
    other tests add runs to. Forked from the command server as the other `tango run`s are (a
    fresh interpreter and its fork server cost some 14 s of CPU); the installed scripts from a
    fresh interpreter, training workers included, are the console-script tests' and
    test_lease_directory's."""
    workspace = tmp_path_factory.mktemp("main") / "workspace"
    output = run_tango(EXPERIMENTS / "demo_fsdp.jsonnet", workspace, "first")
    (workspace.parent / MAIN_JOB_OUTPUT).write_text(output)  # what `make run` printed
    return workspace


@pytest.fixture(scope="session")
def parity_run(tmp_path_factory, request) -> Path:
    """tests/fixtures/engines_parity.jsonnet: the same 12 float32 steps with every engine."""
    return once_per_session(
        tmp_path_factory, request, "parity", lambda w: run_tango(PARITY, w, "parity")
    )


def once_per_session(tmp_path_factory, request, name: str, make) -> Path:
    """A workspace that `make` fills once per test session, also when pytest-xdist runs the
    session in several workers (`make test`): the first worker to need it makes it under a file
    lock in the directory the workers share, the others wait and read it."""
    from filelock import FileLock

    if not hasattr(request.config, "workerinput"):  # no xdist: this process is the session
        workspace = tmp_path_factory.mktemp(name) / "workspace"
        make(workspace)
        return workspace
    shared = tmp_path_factory.getbasetemp().parent  # this session's, shared by its workers
    workspace, done = shared / name / "workspace", shared / name / "done"
    with FileLock(str(shared / f"{name}.lock")):
        if not done.exists():
            make(workspace)
            done.touch()
    return workspace


def history(workspace: Path, run: str, step: str) -> dict:
    """The metric history a `catwalk::train` step stored beside its model."""
    info = json.loads((step_result(workspace, run, step) / "catwalk_model.json").read_text())
    return info["metrics_history"]


def experiment_params(path: Path, overrides: dict | None = None, **ext_vars: str) -> dict:
    """An experiment file evaluated as `tango run` evaluates it from the repository root: with
    the ext vars that tango.yml declares (empty), those given (`--ext-var`), and `-o` overrides."""
    import yaml
    from tango.common.params import Params

    declared = yaml.safe_load((REPO / "tango.yml").read_text()).get("environment", {})
    params = Params.from_file(
        path, params_overrides=json.dumps(overrides or {}), ext_vars={**declared, **ext_vars}
    )
    return params.as_dict()


def evaluate_library(tmp_path: Path, jsonnet: str):
    """A jsonnet expression over the experiments' library, imported as `lib` (with the ext vars
    tango.yml declares: `lib.sweep` reads `training`)."""
    path = tmp_path / "snippet.jsonnet"
    path.write_text(f"local lib = import 'lib/pipeline.libsonnet';\n{{value: {jsonnet}}}")
    return experiment_params(path)["value"]


# The files that take longest (a fresh clone's --durations, docs/reference/tests.md), run first:
# pytest-xdist (`--dist loadfile`) hands files out in collection order, so a long file collected
# last ran alone on one core at the end while the other waited.
LONGEST_FIRST = (
    "test_limit.py",
    "test_lora.py",
    "test_rlvr_demo.py",
    "test_hosts.py",
    "test_dpo_training.py",
    "test_bad_inputs.py",
    "test_one_line_through_tango_run.py",
    "test_sharded_training.py",
    "test_suite_pipeline.py",
    "test_pipeline.py",
    "test_grpo_training.py",
    "test_resume.py",
    "test_parallel_interrupt.py",
    "test_sweeps.py",
    "test_killed_run_leftovers.py",
    "test_generative_training.py",
    "test_checkpoints_demo.py",
    "test_tulu_recipe.py",
)


def pytest_collection_modifyitems(config, items):
    """Files in :data:`LONGEST_FIRST` order, then the others as collected; each file's tests
    keep their order."""
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def pytest_configure(config):
    """One torch thread in the test process too (see TANGO_ENV)."""
    import torch

    torch.set_num_threads(1)
