"""`catwalk-compare`: two evaluations of the same documents, compared document by document.

catwalk-compare RESULT_A RESULT_B      # two `catwalk::evaluate` result directories

Prints, for every mean metric the two share, A, B, the paired difference B - A with its
standard error and 95% interval and whether it is within noise (:mod:`..reports.paired`), then
the documents whose score on the result's shown metric changed (the first `--changed`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tango.common.exceptions import ConfigurationError

from ..errors import command_line
from ..kinds import kind_of_result
from ..metrics.records import documents
from ..reports.paired import paired_metrics, same_documents
from ..settings import METRIC
from ..workspace.formats import EvaluationFormat


def read_result(directory: Path) -> dict[str, Any]:
    """An evaluation's result with its records (data: JSON), or one line saying why not."""
    if not (directory / EvaluationFormat.FILE).is_file():
        raise ConfigurationError(
            f"{directory}: not an evaluation's result directory (no {EvaluationFormat.FILE})"
        )
    try:
        result = EvaluationFormat().read(directory)
    except ValueError as e:
        raise ConfigurationError(f"{directory}: cannot be read ({e})") from None
    if not documents(result):
        raise ConfigurationError(
            f"{directory}: has no per-document records ({EvaluationFormat.RECORDS_FILE}); it was "
            "evaluated before evaluations kept them: evaluate it again"
        )
    return result


def comparison_text(a: Mapping[str, Any], b: Mapping[str, Any], changed: int) -> str:
    """The paired table of two results, then the documents whose shown metric changed."""
    rows = [["metric", "A", "B", "B - A", "95% interval", ""]]
    for one in paired_metrics(a, b, "B against A"):
        noise = "within noise" if one.within_noise else ""
        values = [f"{float(r[one.metric]):.4f}" if one.metric in r else "" for r in (a, b)]
        rows.append([one.metric, *values, one.text(), one.interval_text(), noise])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    shown = kind_of_result(a).shown(a, METRIC)
    first, second = documents(a) or [], documents(b) or []
    moved = [
        (x, y)
        for x, y in zip(first, second, strict=True)
        if x["metrics"].get(shown) != y["metrics"].get(shown)
    ]
    lines += ["", f"{len(moved)} of {len(first)} documents changed on {shown}:"]
    for x, y in moved[:changed]:
        lines.append(
            f"  doc {x['doc']}: {x['metrics'][shown]} -> {y['metrics'][shown]}"
            f" (answer {brief(x.get('answer'))} -> {brief(y.get('answer'))}, gold {y.get('gold')})"
        )
    if len(moved) > changed:
        lines.append(f"  ... and {len(moved) - changed} more (--changed N shows more)")
    return "\n".join(line.rstrip() for line in lines) + "\n"


def brief(answer: Any) -> str:
    """What a model answered, in a few characters: its pick, or its filtered answer."""
    if isinstance(answer, Mapping):
        if "pick" in answer:
            return str(answer["pick"])
        if isinstance(answer.get("filtered"), Mapping):
            return repr(next(iter(answer["filtered"].values()), ""))[:40]
    return "?"


def parser() -> argparse.ArgumentParser:
    """The command's arguments (docs/reference/cli.md is generated from them)."""
    parser = argparse.ArgumentParser(
        prog="catwalk-compare",
        description="Two evaluations of the same documents, compared document by document: "
        "for every mean metric both have, A, B, the paired difference B - A with its standard "
        "error and 95% interval, and whether it is within noise; then the documents whose "
        "score changed.",
    )
    parser.add_argument(
        "a",
        metavar="RESULT_A",
        type=Path,
        help="a catwalk::evaluate result directory (<workspace>/cache/Evaluate-...)",
    )
    parser.add_argument(
        "b", metavar="RESULT_B", type=Path, help="another one, of the same documents"
    )
    parser.add_argument(
        "--changed",
        type=int,
        default=20,
        metavar="N",
        help="how many of the documents whose score changed to list (default: 20)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)

    def compare() -> str:
        a, b = read_result(args.a), read_result(args.b)
        same_documents(documents(a) or [], documents(b) or [], f"{args.b} against {args.a}")
        return comparison_text(a, b, args.changed).rstrip("\n")

    return command_line("catwalk-compare", compare)


if __name__ == "__main__":
    sys.exit(main())
