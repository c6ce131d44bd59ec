"""An adapter run's result as a user outside the package loads it: scored in a fresh process,
once as the merged model (transformers) and once as the base with the peft adapter directory
(`PeftModel.from_pretrained`); both must give what the run reported. Shared by the tests of
each adapter type (test_lora, test_ia3)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from .conftest import REPO, step_result

SCORE_IN_A_FRESH_PROCESS = """
import json, sys
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM
from catwalk_steps.kinds.collate import Collator
from catwalk_steps.scoring.rank_classifier import RankClassifier
from catwalk_steps.workspace.formats import InstancesFormat

every = {}
for step, (result, data, base_spec) in json.loads(sys.argv[1]).items():
    instances = InstancesFormat().read(data).splits["validation"]
    batch = Collator("catwalk::byte_level", max_length=128)(instances)
    scored = every[step] = {}
    for how in ("merged", "peft"):
        model = RankClassifier(**base_spec).eval()  # the scoring around the LM; the LM replaced
        if how == "merged":
            model.lm = AutoModelForCausalLM.from_pretrained(result).eval()
        else:
            model.lm = PeftModel.from_pretrained(model.lm, result + "/adapter").eval()
        with torch.no_grad():
            outputs = model(**batch)
        scored[how] = {"acc": float(outputs["acc"]), "scores": outputs["scores"].tolist()}
print(json.dumps(every))
"""


def scored_in_a_fresh_process(workspace: Path, run_name: str, steps: list[str]) -> dict:
    """`{step: {merged: {acc, scores}, peft: {acc, scores}}}` for the results of the steps
    `steps` of the `tango run` named `run_name`, each on its data step's validation split: one
    fresh process scores them all (its start-up, transformers and peft imported, is most of
    the time)."""
    data = str(step_result(workspace, run_name, "data"))
    every = {}
    for step in steps:
        result = step_result(workspace, run_name, step)
        files = result / "work" / "checkpoints" / "model_files" / "catwalk_model.json"
        every[step] = (str(result), data, json.loads(files.read_text())["base"])
    argv = [sys.executable, "-c", SCORE_IN_A_FRESH_PROCESS, json.dumps(every)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def assert_scores_what_the_run_reported(scored: dict, reported: float, evaluated: float) -> None:
    """Merged and peft agree with each other, with the loop's accuracy (`reported`) and with
    `catwalk::evaluate`'s (`evaluated`)."""
    assert scored["merged"]["acc"] == scored["peft"]["acc"]  # float32, from the forward
    assert scored["merged"]["acc"] == pytest.approx(reported, abs=1e-6)
    assert reported == evaluated
    merged, peft = torch.tensor(scored["merged"]["scores"]), torch.tensor(scored["peft"]["scores"])
    finite = torch.isfinite(peft)
    assert torch.allclose(merged[finite], peft[finite], rtol=1e-5, atol=1e-5)
