"""DPO through `tango run`: the chained demo (SFT, then DPO from the SFT model with it as the
reference) raises the held-out reward accuracy from <= 0.6 to >= 0.9 under FSDP2 and under
FairScale; a run killed mid-way and rerun ends with the same weights byte for byte as one never
interrupted; a sweep over beta computes the reference's log-probabilities once."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from safetensors.torch import load_file

from . import commands
from .conftest import (
    EXPERIMENTS,
    REPO,
    history,
    killed_and_rerun,
    run_tango,
    step_result,
    tango_command,
)
from .training import TINY_WITH_DROPOUT

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

DEMO = EXPERIMENTS / "dpo_demo.jsonnet"
TINY_DPO = REPO / "tests" / "fixtures" / "dpo_tiny.jsonnet"
ACCURACY = "rewards/accuracies"
# The demo, smaller: 2 processes each, SFT 60 steps, DPO 60; the report steps as shipped.
SMALL_DEMO = {
    "steps.sft_data.task.sizes": {"train": 512, "validation": 32},
    "steps.sft_trained.train_steps": 60,
    "steps.sft_trained.validate_every": 60,
    "steps.sft_trained.checkpoint_every": 60,
    "steps.dpo_data.task.sizes": {"train": 512, "validation": 32},
    "steps.dpo_trained.train_steps": 60,
    "steps.dpo_trained.validate_every": 60,
    "steps.dpo_trained.checkpoint_every": 60,
}


def metrics(workspace: Path, run: str, step: str) -> dict:
    return json.loads((step_result(workspace, run, step) / "data.json").read_text())


@pytest.fixture(scope="module")
def demo_workspace(tmp_path_factory) -> Path:
    """The demo run with FSDP2 (its engine: all of it, the generation suite and the reports
    too), then its DPO step again with FairScale in the same workspace, as far as the
    evaluation after it (the SFT model and the reference's log-probabilities are cached:
    reused)."""
    workspace = tmp_path_factory.mktemp("dpo_demo") / "ws"
    run_tango(DEMO, workspace, "fsdp2", SMALL_DEMO)
    fairscale = {**SMALL_DEMO, "steps.dpo_trained.training_engine.type": "catwalk::fairscale"}
    steps = ("-s", "dpo_eval_before", "-s", "dpo_eval_after")
    output = run_tango(DEMO, workspace, "fairscale", fairscale, extra=steps)
    assert 'Starting step "dpo_reference"' not in output  # cached: the same reference, data
    return workspace


@pytest.mark.parametrize("run", ["fsdp2", "fairscale"])
def test_the_demo_s_held_out_reward_accuracy_rises_from_chance_to_above_0_9(demo_workspace, run):
    before = metrics(demo_workspace, run, "dpo_eval_before")
    after = metrics(demo_workspace, run, "dpo_eval_after")
    assert before["kind"] == "preference" and before["n"] == 32
    assert before[ACCURACY] <= 0.6  # the policy is its reference: every reward is 0
    assert after[ACCURACY] >= 0.9, after
    assert after[f"{ACCURACY}_stderr"] is not None
    history = after["training_history"]["validation"]
    assert history[-1][ACCURACY] == pytest.approx(after[ACCURACY])  # the loop's, the same pairs
    # tokens/s as every other run has it: in each logged window, and in the report's table
    assert all(entry["tokens_per_s"] > 0 for entry in after["training_history"]["train"])
    if run != "fsdp2":  # (the FairScale run stops after its evaluations)
        return
    table = (step_result(demo_workspace, run, "dpo_report") / "report.md").read_text()
    header = next(line for line in table.splitlines() if line.startswith("| run |"))
    row = next(line for line in table.splitlines() if line.startswith("| after |"))
    assert "tokens/s" in header and row.split("|")[-2].strip(), (header, row)
    runs = [line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| ")]
    assert runs[1:3] == ["before", "after"], runs  # the library's order, not alphabetical


def test_the_fairscale_run_trained_another_model_from_the_same_sft_and_reference(demo_workspace):
    fsdp2 = step_result(demo_workspace, "fsdp2", "dpo_trained")
    fairscale = step_result(demo_workspace, "fairscale", "dpo_trained")
    assert fsdp2 != fairscale
    for run in ("fsdp2", "fairscale"):
        assert step_result(demo_workspace, run, "dpo_reference") == step_result(
            demo_workspace, "fsdp2", "dpo_reference"
        )


def test_the_demo_s_generation_report_plots_exact_match_not_the_reward_accuracy(demo_workspace):
    """`gen_report` ("base, SFT, DPO" on the synthetic generative questions), read from its
    output: its table's metric is exact match, and so is its plot's (the DPO model validated
    on the reward accuracy: its curve is left out, not plotted in exact match's place)."""
    from catwalk_steps.reports import ReportFormat
    from catwalk_steps.reports.plots import validation_metric

    exact = "exact_match,remove_whitespace"
    report = ReportFormat().read(step_result(demo_workspace, "fsdp2", "gen_report"))
    assert sorted(report.rows) == ["base", "dpo", "sft"]
    assert all(exact in row for row in report.rows.values())
    assert "rewards/accuracies" not in report.columns
    assert validation_metric(report, "acc") == exact


def killed_dpo(pids: Path, **faults) -> dict:
    """The tiny DPO run on 2 processes with dropout on (every random generator matters)."""
    return {
        "steps.dpo_trained.model.config": TINY_WITH_DROPOUT,
        "steps.dpo_trained.device_count": 2,
        "steps.dpo_trained.train_steps": 6,
        "steps.dpo_trained.validate_every": 2,
        "steps.dpo_trained.checkpoint_every": 2,
        "steps.dpo_trained.callbacks": [{"type": "test::faults", "pid_dir": str(pids), **faults}],
    }


def model_bytes(workspace: Path, run: str) -> bytes:
    return (step_result(workspace, run, "dpo_trained") / "model.safetensors").read_bytes()


def test_a_killed_dpo_run_rerun_ends_with_the_weights_of_an_uninterrupted_one(tmp_path):
    pids = tmp_path / "pids"
    overrides = killed_dpo(pids, kill_step=3)  # rank 1, after checkpoint 2, before 4
    killed_and_rerun(TINY_DPO, tmp_path / "ws", overrides, "dpo_trained", resumed_at=2)
    whole = killed_dpo(tmp_path / "whole_pids")  # no fault: never interrupted
    run_tango(TINY_DPO, tmp_path / "whole", "whole", whole, extra=("-s", "dpo_trained"))
    assert model_bytes(tmp_path / "ws", "rerun") == model_bytes(tmp_path / "whole", "whole")


BETA_SWEEP = """
local lib = import 'lib/pipeline.libsonnet';
lib.preference_sweep(
  task=lib.tasks.synthetic_preference { sizes: { train: 16, validation: 8 } },
  model=lib.models.tiny_gpt2,
  engine=lib.engines.torch(),
  grid={ beta: lib.ext_numbers('betas', [0.1, 0.5]) },
  training=lib.training.demo { device_count: 1, batch_size: 4, train_steps: 2,
                                validate_every: 2 },
)
"""


def test_a_beta_sweep_computes_the_reference_once(tmp_path):
    """Two betas: one reference step for both cells; a third beta later: none again."""
    experiment = tmp_path / "sweep.jsonnet"
    experiment.write_text(BETA_SWEEP)
    workspace = tmp_path / "ws"
    output = run_tango(experiment, workspace, "two")
    assert output.count('Starting step "dpo_reference"') == 1, output[-3000:]
    assert output.count('Starting step "trained,dpo_beta=') == 2
    more = run_tango(experiment, workspace, "three", extra=("--ext-var", "betas=0.1,0.5,1"))
    assert 'Starting step "dpo_reference"' not in more
    assert more.count('Starting step "trained,dpo_beta=') == 1  # the new cell alone
    assert len(list((workspace / "cache").glob("ReferenceLogprobs-*"))) == 1


def references(workspace: Path, run: str) -> list:
    from catwalk_steps.workspace.formats import InstancesFormat

    stored = InstancesFormat().read(step_result(workspace, run, "dpo_reference"))
    return [x for split in stored.splits.values() for pair in split for x in pair.reference]


def test_the_reference_step_sharded_over_two_workers_gives_the_one_device_numbers(tmp_path):
    """Scored as evaluate scores: each worker a share of the pairs, the same log-probabilities."""
    run_tango(TINY_DPO, tmp_path / "one", "one", extra=("-s", "dpo_reference"))
    two = {"steps.dpo_reference.device_count": 2}
    output = run_tango(TINY_DPO, tmp_path / "two", "two", two, extra=("-s", "dpo_reference"))
    assert "Evaluating on 2 CPU processes" in output
    one, shared = references(tmp_path / "one", "one"), references(tmp_path / "two", "two")
    assert len(one) == 2 * 40 and shared == pytest.approx(one, abs=1e-5)


def test_an_edited_reference_log_probability_is_one_line_and_never_trained_on(tmp_path):
    """The cached reference's pairs carry their SHA-256: a number edited in their Arrow file is
    one line naming the file when DPO training reads them, and no training starts."""
    import struct

    from catwalk_steps.workspace.formats import InstancesFormat

    from .commands import error_lines

    workspace = tmp_path / "ws"
    run_tango(TINY_DPO, workspace, "reference", extra=("-s", "dpo_reference"))
    result = step_result(workspace, "reference", "dpo_reference")
    value = InstancesFormat().read(result)["train"][0].reference[0]
    path = result / "train.arrow"
    data = path.read_bytes()
    assert struct.pack("<d", value) in data
    path.write_bytes(data.replace(struct.pack("<d", value), struct.pack("<d", -1000.0), 1))
    argv = tango_command(TINY_DPO, workspace, "edited", None, "-s", "dpo_trained")
    done = commands.run(argv, timeout=300)
    output = done.stdout + done.stderr
    lines = error_lines(output)
    assert done.returncode != 0 and len(lines) == 1, lines or output[-3000:]
    assert f"DamagedResultError: {result}: this cached step result cannot be read" in lines[0]
    assert f"({path}: changed since it was written" in lines[0]
    assert "Training on" not in output


ADAPTER_DPO = """
local lib = import 'lib/pipeline.libsonnet';
local tuned = lib.preference(
  task=lib.tasks.synthetic_preference { sizes: { train: 32, validation: 8 } },
  model=lib.models.tiny_gpt2 { adapter: lib.models.lora(targets=lib.models.gpt2_projections) },
  engine=lib.engines.torch_fsdp() {
    precision: 'bf16', max_grad_norm: 1.0, activation_checkpointing: true },
  training=lib.training.demo { device_count: 2, batch_size: 4, grad_accum: 2, train_steps: 4,
                                validate_every: 4, checkpoint_every: 4, log_every: 1 },
  dpo={ beta: 0.1 },
);
tuned { steps+: { dpo_trained+: { callbacks: [{ type: 'test::base_unchanged' }] } } }
"""


def test_a_lora_adapter_trains_by_dpo_under_fsdp2_in_bf16_with_every_option(tmp_path):
    """DPO with a LoRA adapter (the reference: the base with the adapter off, in the same model)
    under FSDP2 on 2 processes, in bf16 with clipping, gradient accumulation and activation
    checkpointing: finite losses, the base bitwise unchanged, the adapter trained, the reward
    accuracy scored after."""
    experiment = tmp_path / "lora_dpo.jsonnet"
    experiment.write_text(ADAPTER_DPO)
    workspace = tmp_path / "ws"
    run_tango(experiment, workspace, "lora")
    trained = step_result(workspace, "lora", "dpo_trained")
    losses = [entry["loss"] for entry in history(workspace, "lora", "dpo_trained")["train"]]
    assert len(losses) == 4 and all(math.isfinite(loss) for loss in losses), losses
    checked = json.loads((trained / "work" / "base_unchanged.json").read_text())
    assert checked["compared"] > 10  # every base weight, gathered whole, bitwise as built
    adapter = load_file(trained / "adapter" / "adapter_model.safetensors")
    assert any(value.abs().sum() > 0 for name, value in adapter.items() if "lora_B" in name)
    assert metrics(workspace, "lora", "dpo_eval_after")[f"{ACCURACY}_stderr"] is not None
