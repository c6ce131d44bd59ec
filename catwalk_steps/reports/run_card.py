"""Run cards: what code, on what machine, with what settings produced a result.

A training step writes its card into its work directory when it starts (trackers send it to
W&B and TensorBoard) and keeps it, completed with the run's wall time and throughput, beside the
trained model (`catwalk_model.json`); a report carries every run's card and shows them under its
table. The environment part (versions, git commit, host) is collected by
:mod:`catwalk_steps.environment`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..metrics.records import split_stderrs

# --- Text -----------------------------------------------------------------------------------


def describe_host(machine: Mapping[str, Any]) -> str:
    gpu_list = machine.get("gpus") or []
    names: dict[str, int] = {}
    for gpu in gpu_list:
        label = f"{gpu['name']} ({gpu['memory_mib'] / 1024:.0f} GiB)"
        names[label] = names.get(label, 0) + 1
    gpu_text = ", ".join(f"{count} x {label}" for label, count in names.items()) or "no GPU"
    cpu = f"{machine.get('cpu')}, {machine.get('cores')} cores"
    return f"{machine.get('hostname')}: {cpu}; {gpu_text}"


def describe_git(git: Mapping[str, Any]) -> str:
    if not git.get("commit"):
        return "not in a git repository"
    labels: dict[object, str] = {True: " (dirty: uncommitted changes)", False: " (clean)"}
    dirty = labels.get(git.get("dirty"), "")
    return f"{git['commit']}{dirty}"


def describe_versions(found: Mapping[str, Any]) -> str:
    return ", ".join(f"{name} {version}" for name, version in found.items() if version)


def table(header: list[str], rows: list[list[str]], right: int = 0) -> str:
    """A markdown table whose last `right` columns are right-aligned."""
    align = ["---"] * (len(header) - right) + ["---:"] * right
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(lines) + "\n"


def number(value: Any, digits: int = 1) -> str:
    return "" if not isinstance(value, (int, float)) else f"{value:.{digits}f}"


def environment_line(env: Mapping[str, Any]) -> str:
    return (
        f"{describe_versions(env.get('versions', {}))}; code {describe_git(env.get('git', {}))}; "
        f"host {describe_host(env.get('host', {}))}"
    )


def describe_trained(trained: Mapping[str, Any] | None) -> str:
    """What training updated: `LoRA r=8 alpha=16: 73,728 of 124,513,536 parameters`, or
    `all 124,513,536 parameters` (blank for a card written before cards said)."""
    if not trained:
        return ""
    total = f"{trained['parameters']:,} parameters"
    adapter = trained.get("adapter")
    if adapter is None:
        return f"all {total}"
    from ..adapters.registry import describe

    trainable = f"{trained['trainable_parameters']:,}"
    return f"{describe(adapter)}: {trainable} of {total}"


def devices_text(card: Mapping[str, Any]) -> str:
    """The card's devices, with the torch threads of each CPU worker when it says."""
    threads = card.get("cpu_threads")
    each = "" if threads is None else f" x {threads} thread{'s' if threads != 1 else ''}"
    return f"{card.get('devices', '')}{each}"


def runs_table(cards: Mapping[str, Mapping[str, Any]], here: Mapping[str, Any]) -> str:
    header = [
        "run",
        "training step",
        "trained",
        "devices",
        "where",
        "world size",
        "wall time s",
        "s/step",
    ]
    rows = []
    for run, card in cards.items():
        env, training = card.get("environment", {}), card.get("training", {})
        where = "as above" if env == here else environment_line(env)
        rows.append(
            [
                run,
                f"`{card.get('step', {}).get('unique_id', '')}`",
                describe_trained(card.get("trained")),
                devices_text(card),
                where,
                str(card.get("world_size", "")),
                number(training.get("wall_time_s")),
                number(training.get("s_per_step"), 4),
            ]
        )
    return table(header, rows, right=3)


def final_metrics_markdown(cards: Mapping[str, Mapping[str, Any]]) -> str:
    """What each run ended with (its card's `final_metrics`: the last validation and in-loop
    scores), each value with `± its standard error` where the loop computed one."""
    lines = []
    for run, card in cards.items():
        final = card.get("final_metrics") or {}
        scored = {"validation": final["validation"]} if final.get("validation") else {}
        parts = [
            scores_text(name, point) for name, point in {**scored, **final.get("tasks", {})}.items()
        ]
        if parts:
            lines.append(f"- `{run}`: " + "; ".join(parts))
    if not lines:
        return ""
    head = "What each run ended with (± the standard error over the documents scored):\n\n"
    return head + "\n".join(lines) + "\n\n"


def scores_text(name: str, point: Mapping[str, Any]) -> str:
    """`validation at step 200: acc 0.6312 ± 0.0113, count 64`."""
    values, errors = split_stderrs({k: v for k, v in point.items() if k != "step"})
    shown = []
    for key, value in values.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        text = f"{key} {value}" if isinstance(value, int) else f"{key} {value:.4f}"
        shown.append(f"{text} ± {errors[key]:.4f}" if key in errors else text)
    return f"{name} at step {point.get('step')}: " + ", ".join(shown)


def run_cards_markdown(
    cards: Mapping[str, Mapping[str, Any]],
    here: Mapping[str, Any],
    step_times: Sequence[Mapping[str, Any]],
) -> str:
    """The run card section of `report.md`: where and how each run was made."""
    text = "## Run card\n\n"
    if here:
        text += f"Report made with {environment_line(here)}.\n\n"
    if cards:
        text += runs_table(cards, here) + "\n" + final_metrics_markdown(cards)
    if step_times:
        rows = [
            [str(t["name"]), f"`{t['unique_id']}`", number(t.get("wall_time_s"))]
            for t in step_times
        ]
        text += "Wall time per step (as each ran; cached steps keep theirs):\n\n"
        text += table(["step", "unique id", "wall time s"], rows, right=1) + "\n"
    for run, card in cards.items():
        config = json.dumps(card.get("config"), indent=2, sort_keys=True)
        text += (
            f"<details><summary>Resolved config of <code>{run}</code></summary>\n\n"
            f"```json\n{config}\n```\n\n</details>\n\n"
        )
    return text.rstrip("\n") + "\n"
