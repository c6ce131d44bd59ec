"""bench/model_scale.py's report: its tables in markdown, and the figures a partial rerun
(`--skip`) keeps from the last full one."""

from __future__ import annotations

import argparse
import json

from common import RESULTS

MiB = 2**20


def markdown(results: dict, args: argparse.Namespace) -> str:
    lines = sizes_table(results, args)
    if results.get("devices"):
        lines += devices_table(results["devices"])
    if results.get("training"):
        lines += training_table(results["training"], args)
    return "\n".join(lines) + "\n"


def sizes_table(results: dict, args: argparse.Namespace) -> list[str]:
    lines = [
        "Real-size models through `tango run` (`python bench/model_scale.py`): GPT-2 "
        "architecture, GPT-NeoX vocabulary (50,277), random weights saved with "
        f"`save_pretrained`; the suite is the 12 standard tasks, {args.instances} instances "
        f"each ({args.mmlu_per_subject} per MMLU subject), offline data, batch 16, fp32, "
        "2 CPU cores.",
        "",
        "| model | parameters | fp32 MiB | graph build, 1 task: MiB / s | 12 tasks: MiB / s "
        "| suite: peak MiB / s | bound MiB | cached rerun: peak MiB / s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size, row in results["sizes"].items():
        fp32 = row["parameters"] * 4 / MiB
        bound = 2 * fp32 + 1.5 * 1024
        one, twelve = row["graph_build"]["1"], row["graph_build"]["12"]
        suite, cached = row["suite"], row["cached"]
        lines.append(
            f"| {size} | {row['parameters'] / 1e6:.1f}M | {fp32:.0f} | "
            f"{one['tree_peak_mib']:.0f} / {one['wall_s']:.1f} | "
            f"{twelve['tree_peak_mib']:.0f} / {twelve['wall_s']:.1f} | "
            f"{suite['tree_peak_mib']:.0f} / {suite['wall_s']:.0f} | {bound:.0f} | "
            f"{cached['tree_peak_mib']:.0f} / {cached['wall_s']:.1f} |"
        )
    return lines


def devices_table(devices: dict) -> list[str]:
    lines = [
        "",
        f"Evaluation across devices ({devices['size']}, arc_easy, 40 instances, fp32): "
        "each rank's peak RSS, and how much it grew from the process before the model was "
        "built (imports and data: the rest). The one device is a process of its own, the "
        "others `tango run` with `device_count: 2`.",
        "",
        "| evaluation | peak MiB per rank | vs one device | growth over the process before "
        "the model, MiB per rank | vs one device |",
        "|---|---:|---:|---:|---:|",
    ]
    one = devices["rows"]["one device"]
    one_peak, one_growth = one["peaks"][0], one["peaks"][0] - one["starts"][0]
    for name, row in devices["rows"].items():
        growths = [p - s for p, s in zip(row["peaks"], row["starts"], strict=True)]
        peaks = " / ".join(f"{p:.0f}" for p in row["peaks"])
        grown = " / ".join(f"{g:.0f}" for g in growths)
        lines.append(
            f"| {name} | {peaks} | {max(row['peaks']) / one_peak:.2f} | {grown} | "
            f"{max(growths) / one_growth:.2f} |"
        )
    return lines


def training_table(training: dict, args: argparse.Namespace) -> list[str]:
    lines = [
        "",
        f"Training ({training['size']}, 2 CPU processes, batch {args.batch} x {args.length} "
        f"tokens per rank, fp32, AdamW, {args.train_steps} steps after 2 warm-up steps; "
        "blocks wrapped; means over ranks):",
        "",
        "| engine | model state MiB/rank | peak MiB/rank (training) | DDP's / this | "
        "lifetime peak MiB/rank | DDP's / this |",
        "|---|---:|---:|---:|---:|---:|",
    ]

    def mean(rows: list[dict], key: str) -> float:
        return sum(r[key] for r in rows) / len(rows) / MiB

    ddp = training["rows"]["ddp"]
    for name, rows in training["rows"].items():
        lines.append(
            f"| {name} | {mean(rows, 'model_state_bytes'):.0f} | "
            f"{mean(rows, 'peak_training_bytes'):.0f} | "
            f"{mean(ddp, 'peak_training_bytes') / mean(rows, 'peak_training_bytes'):.2f} | "
            f"{mean(rows, 'peak_lifetime_bytes'):.0f} | "
            f"{mean(ddp, 'peak_lifetime_bytes') / mean(rows, 'peak_lifetime_bytes'):.2f} |"
        )
    return lines


def with_earlier(results: dict, args: argparse.Namespace) -> dict:
    """With `--skip`, the sections not measured now keep their saved figures (same sizes)."""
    saved = RESULTS / "model_scale.json"
    if not args.skip or not saved.is_file():
        return results
    earlier = json.loads(saved.read_text())
    for section in ("devices", "training"):
        if section in args.skip and section in earlier:
            results[section] = earlier[section]
    for size, row in results["sizes"].items():
        before = earlier.get("sizes", {}).get(size, {})
        if "graph" in args.skip:
            row["graph_build"] = before.get("graph_build", {})
        if "suite" in args.skip:
            row.update({key: before[key] for key in ("suite", "cached") if key in before})
    return results
