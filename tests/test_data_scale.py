"""Data at real size through `tango run` (issue 56): a generated SFT file of 50,000 rows trains
on 2 processes with each rank's peak memory within 100 MB of a 1,000-row file's, each rank
decoding only the rows it trains on (and mapping only their tokens, stored once) and the `tango
run` process none of them but in the split's tokens build, which reads each row once, in
processes of its own above 20,000 rows (the job sends the workers the stored split's path and
its tokens', never its rows); a cached rerun reads no stored row and no row of the files but
each file's first line (its fields, checked against the templates).

A rank's peak memory is its peak RSS (`ru_maxrss`, as the run's metrics record it): file-backed
pages it maps (the stored split's and its tokens', `RssFile`) count in it, so the bound holds
only where a rank touches no more of those files than its own rows.

Rows are counted by tests/row_counting.py, included in the runs."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from .conftest import EXPERIMENTS, TANGO_ENV, run_tango, step_result

DEMO = EXPERIMENTS / "demo.jsonnet"
# Words of two to six letters (an English text's are about five).
WORDS = [c + v + e for c in "bdfklmnprst" for v in ("a", "e", "io", "ou") for e in ("", "n", "ter")]
STEPS, BATCH = 3, 8  # training steps, instances per rank and step
SLACK_MIB = 100  # the bound on what 49,000 more rows may cost a rank


def write_sft(path: Path, count: int, seed: int = 0) -> Path:
    """`count` rows of a ~60-word question and a ~20-word answer (the same first rows for the
    same seed)."""
    rng = random.Random(seed)
    with path.open("w") as f:
        for _ in range(count):
            row = {"q": " ".join(rng.choices(WORDS, k=60)), "a": " ".join(rng.choices(WORDS, k=20))}
            f.write(json.dumps(row) + "\n")
    return path


def sft_overrides(train: Path, validation: Path) -> dict:
    """The demo trained on a generative task of one's own from the files, 2 processes."""
    task = {
        "type": "catwalk::generative",
        "name": "sft",
        "source": "files",
        "data_files": {"train": str(train), "validation": str(validation)},
        "doc_to_text": "Q: {{q}}\nA:",
        "doc_to_target": "{{a}}",
        "until": ["\n"],
        "max_gen_toks": 32,
    }
    trained = {
        "device_count": 2,
        "train_steps": STEPS,
        "validate_every": STEPS,
        "checkpoint_every": STEPS,
        "train_dataloader.batch_size": BATCH,
    }
    return {"steps.data.task": task, **{f"steps.trained.{k}": v for k, v in trained.items()}}


def counted_run(tmp_path: Path, name: str, workspace: Path, overrides: dict) -> list[dict]:
    """`tango run -s trained` with the rows each of its processes read counted."""
    counts = tmp_path / f"counts_{name}"
    counts.mkdir()
    env = {**TANGO_ENV, "CATWALK_ROW_COUNTS": str(counts)}
    extra = ("-s", "trained", "-i", "tests.row_counting")
    run_tango(DEMO, workspace, name, overrides, extra=extra, env=env, timeout=400)
    return [json.loads(path.read_text()) for path in counts.glob("*.json")]


def rank_peaks(workspace: Path, name: str) -> dict[str, float]:
    """Each rank's peak resident memory (MiB) over the run, as its metrics recorded it."""
    model = step_result(workspace, name, "trained") / "catwalk_model.json"
    peaks: dict[str, float] = {}
    for entry in json.loads(model.read_text())["metrics_history"]["train"]:
        for rank, mib in (entry.get("peak_memory_mib") or {}).items():
            peaks[rank] = max(peaks.get(rank, 0.0), mib)
    return peaks


@pytest.mark.slow
@pytest.mark.distributed
def test_fifty_thousand_rows_train_in_a_thousand_rows_memory_and_a_rerun_reads_none(tmp_path):
    validation = write_sft(tmp_path / "validation.jsonl", 8, seed=1)
    small, big = tmp_path / "ws_1k", tmp_path / "ws_50k"
    rows = {"1k": 1_000, "50k": 50_000}
    files = {size: write_sft(tmp_path / f"sft_{size}.jsonl", n) for size, n in rows.items()}
    counted_run(tmp_path, "small", small, sft_overrides(files["1k"], validation))
    counts = counted_run(tmp_path, "big", big, sft_overrides(files["50k"], validation))

    peaks = {"1k": rank_peaks(small, "small"), "50k": rank_peaks(big, "big")}
    memory = [c["memory"] for c in counts if c["role"] == "worker" and c["decoded"]]
    assert set(peaks["50k"]) == {"rank0", "rank1"}, peaks
    for rank, mib in peaks["50k"].items():
        assert mib <= peaks["1k"][rank] + SLACK_MIB, (peaks, memory)

    stored = str(step_result(big, "big", "data") / "train.arrow")
    [main] = [c for c in counts if c["graph_build"] is not None]
    workers = [c for c in counts if c["role"] == "worker" and c["decoded"]]
    assert len(workers) == 2, counts
    for worker in workers:  # its batches' rows, and the first row a stage asks its kind of
        assert worker["decoded"].get(stored, 0) <= STEPS * BATCH + 4, worker
    assert main["decoded"].get(stored, 0) <= 4, main  # the kind's first row, no more
    assert main["tokenized"].get(stored, 0) in (0, rows["50k"]), main  # alone: each row once
    assert main["lines"][str(files["50k"])] >= rows["50k"]  # the load step read every row

    rerun = counted_run(tmp_path, "again", big, sft_overrides(files["50k"], validation))
    [main] = [c for c in rerun if c["graph_build"] is not None]
    assert not [c for c in rerun if c["role"] == "worker"]  # nothing trained again
    assert main["graph_build"]["decoded"] == {} and main["decoded"] == {}, main
    assert set(main["lines"]) <= {str(files["50k"]), str(validation)}, main
    assert all(lines <= 1 for lines in main["lines"].values()), main  # each file's first line
