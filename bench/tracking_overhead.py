"""Benchmark: what W&B and TensorBoard logging costs a demo training step.

    .venv/bin/python bench/tracking_overhead.py [--steps 200] [--repeats 2]

The demo's training job as `make run` trains it (experiments/demo_fsdp.jsonnet: synthetic task,
tiny GPT-2, FairScale FSDP with blocks wrapped, bf16, 2 CPU processes, 16 instances per rank and
step), with W&B (offline) and TensorBoard on, at the demo's `log_every` (10) and at every step.
Two measures:

- inside the run: the seconds rank 0 spends in the trackers' hooks (rows, W&B's `log`,
  TensorBoard's writes and flushes) and in the history's throughput figures (one all-gather per
  logged step), per training step, against the mean training step. Opening W&B and TensorBoard
  (once, before the first step) is reported apart;
- from outside: the mean seconds per step (logged steps after the first) of the same job with
  and without trackers, alternated `--repeats` times. This also counts what the W&B service
  process costs the two cores it shares with training, but two shared cores make it noisy.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import REPO, demo_model_spec, machine, write_results  # noqa: E402
from tango.common import DatasetDict, Lazy, Params  # noqa: E402
from tango.integrations.torch import DataLoader, Model, TrainCallback, TrainingEngine  # noqa: E402
from tracking_timers import TIMINGS  # noqa: E402  (registers bench::wandb, ...)


def demo_job(work_dir: Path, steps: int, log_every: int, tracked: bool):
    from catwalk_steps.distributed.devices import plan_devices
    from catwalk_steps.tasks.synthetic import SyntheticTask
    from catwalk_steps.training.job import Schedule, TrainingJob

    experiment = Params.from_file(REPO / "experiments" / "demo_fsdp.jsonnet").as_dict()
    trained = experiment["steps"]["trained"]
    task_block = experiment["steps"]["data"]["task"]
    task = SyntheticTask(**{k: v for k, v in task_block.items() if k != "type"})
    callbacks = [Lazy(TrainCallback, Params({"type": "bench::run_metrics"}))]
    if tracked:
        callbacks = [
            Lazy(TrainCallback, Params({"type": "bench::wandb", "mode": "offline"})),
            Lazy(TrainCallback, Params({"type": "bench::tensorboard"})),
            *callbacks,
        ]
    schedule = Schedule(
        train_steps=steps,
        validate_every=100,
        checkpoint_every=100,
        log_every=log_every,
        seed=trained["seed"],
    )
    return TrainingJob(
        step_id=f"bench-{work_dir.name}",
        step_name="trained",
        work_dir=work_dir,
        model=Lazy(Model, Params({"type": "catwalk::rank_classifier", **demo_model_spec()})),
        training_engine=Lazy(TrainingEngine, Params(trained["training_engine"])),
        dataset_dict=DatasetDict(splits=task.load(["train", "validation"])),
        train_dataloader=Lazy(DataLoader, Params(trained["train_dataloader"])),
        validation_dataloader=Lazy(DataLoader, Params(trained["validation_dataloader"])),
        callbacks=callbacks,
        schedule=schedule,
        devices=plan_devices(trained["device_count"], requested="cpu"),
        include_package=("catwalk_steps", "tracking_timers"),
    )


def run(work_dir: Path, steps: int, log_every: int, tracked: bool) -> dict:
    from catwalk_steps.launch import run_training

    run_training(demo_job(work_dir, steps, log_every, tracked))
    history = json.loads((work_dir / "metrics_history.json").read_text())
    seconds = [e["s_per_step"] for e in history["train"][1:]]
    result = {"s_per_step": statistics.fmean(seconds), "logged_steps": len(history["train"])}
    for path in work_dir.glob(f"*.{TIMINGS}"):
        result[path.name.split(".")[0]] = json.loads(path.read_text())
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    rows, runs = [], []
    with tempfile.TemporaryDirectory() as scratch:
        for log_every in (10, 1):
            plain, tracked = [], []
            for repeat in range(args.repeats):
                for on, into in ((False, plain), (True, tracked)):
                    work_dir = Path(scratch) / f"log{log_every}-{repeat}-{'on' if on else 'off'}"
                    result = run(work_dir, args.steps, log_every, on)
                    runs.append({"log_every": log_every, "trackers": on, **result})
                    into.append(result)
            rows.append(summary(log_every, args.steps, plain, tracked))
    markdown = table(rows, args)
    write_results("tracking_overhead", {"machine": machine(), "rows": rows, "runs": runs}, markdown)


def summary(log_every: int, steps: int, plain: list[dict], tracked: list[dict]) -> dict:
    step_s = statistics.fmean(r["s_per_step"] for r in tracked)
    hooks = statistics.fmean(
        r["TimedWandb"]["hooks"] + r["TimedTensorBoard"]["hooks"] for r in tracked
    )
    measure = statistics.fmean(r["RunMetrics"]["measure_s"] for r in tracked)
    return {
        "log_every": log_every,
        "step_ms": 1000 * step_s,
        "tracker_ms_per_step": 1000 * hooks / steps,
        "figures_ms_per_step": 1000 * measure / steps,
        "inside_share": (hooks + measure) / steps / step_s,
        "open_s": statistics.fmean(
            r["TimedWandb"]["open"] + r["TimedTensorBoard"]["open"] for r in tracked
        ),
        "plain_step_ms": 1000 * statistics.fmean(r["s_per_step"] for r in plain),
        "outside_share": step_s / statistics.fmean(r["s_per_step"] for r in plain) - 1,
    }


def table(rows: list[dict], args) -> str:
    lines = [
        f"Demo training job (FairScale FSDP, blocks wrapped, bf16, 2 CPU processes, 16 instances "
        f"per rank and step), {args.steps} steps, W&B offline + TensorBoard; {args.repeats} runs "
        "with and without trackers, alternated.",
        "",
        "| log_every | step ms | trackers ms/step | figures ms/step | inside: share of a step "
        "| opening W&B + TensorBoard s | step ms without trackers | outside: difference |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['log_every']} | {r['step_ms']:.1f} | {r['tracker_ms_per_step']:.3f} | "
            f"{r['figures_ms_per_step']:.3f} | {100 * r['inside_share']:.2f}% | {r['open_s']:.1f} "
            f"| {r['plain_step_ms']:.1f} | {100 * r['outside_share']:+.1f}% |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
