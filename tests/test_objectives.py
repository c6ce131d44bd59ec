"""A training objective answers for itself (issue 58): nothing outside `objectives/` compares
an objective's name; the kinds each objective trains on; where a reference comes from, decided
once and followed by the experiment library."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tango.common.exceptions import ConfigurationError

from catwalk_steps.kinds import kind_named
from catwalk_steps.objectives import (
    Reference,
    objective_named,
    objective_names,
    reference_from,
    with_settings,
)


def deciding_patterns() -> dict[str, str]:
    """What deciding an objective outside `objectives/` looks like, for every registered name:
    its name compared (`==`, `!=`, `in`, `is`, a `case`) or looked up."""
    name = rf"""["']({"|".join(map(re.escape, objective_names()))})["']"""
    return {
        "an objective's name compared": rf"(==|!=|\bin|\bis|\bcase)\s*{name}|{name}\s*(==|!=)",
        "an objective's name in a tuple, list or set compared": rf"\bin\s*[(\[{{][^)\]}}]*{name}",
        "an objective looked up by its name": rf"(objective_named\(|OBJECTIVES\[)\s*{name}",
    }


def objective_deciding(root: Path) -> list[str]:
    """Every line of the package outside objectives/ that decides an objective by its name."""
    found = []
    patterns = deciding_patterns()
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if relative.startswith("objectives/"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            code = line.split("#", 1)[0]
            for what, pattern in patterns.items():
                if re.search(pattern, code):
                    found.append(f"{relative}:{number}: {what}: {line.strip()}")
    return found


def test_no_stage_outside_objectives_compares_an_objective_name():
    """Every stage asks the objective (its examples, settings, loss, reference): before issue
    58 its name was compared in 7 places (kinds/, checks/, scoring/)."""
    from .conftest import REPO

    assert objective_deciding(REPO / "catwalk_steps") == []


def test_the_objective_grep_finds_what_it_looks_for(tmp_path):
    """The grep above can fail: each way of deciding by name, planted, is found; objectives/
    may."""
    lines = [
        'if self.training and self.objective == "lm":',
        "if objective != 'dpo' or params.get('adapter') is not None:",
        'block = {k: v for k, v in block.items()} if "rank" == objective else block',
        'if objective in ("lm", "rank"):',
        "match objective:\n    case 'dpo':",
        'loss = objective_named("rank").choice_loss(scores)',
    ]
    planted = tmp_path / "scoring" / "planted.py"
    planted.parent.mkdir()
    planted.write_text("\n".join(lines) + "\n")
    (tmp_path / "objectives").mkdir()
    (tmp_path / "objectives" / "mine.py").write_text("\n".join(lines) + "\n")
    found = objective_deciding(tmp_path)
    assert all(line.startswith("scoring/planted.py:") for line in found), found
    assert {int(line.split(":")[1]) for line in found} == {1, 2, 3, 4, 6, 7}, found


@pytest.mark.parametrize(
    ("objective", "kind", "trains"),
    [
        ("lm", "multiple_choice", True),
        ("lm", "olmo_eval", True),
        ("lm", "generative", True),
        ("lm", "preference", False),
        ("rank", "multiple_choice", True),
        ("rank", "olmo_eval", True),
        ("rank", "generative", False),
        ("rank", "preference", False),
        ("dpo", "multiple_choice", False),
        ("dpo", "generative", False),
        ("dpo", "preference", True),
        ("grpo", "multiple_choice", False),
        ("grpo", "generative", True),
        ("grpo", "preference", False),
    ],
)
def test_each_objective_trains_on_the_kinds_whose_examples_it_takes(objective, kind, trains):
    """What the graph build checks of a training step's task (through `tango run`:
    tests/test_preference_bad_inputs.py, tests/test_bad_inputs.py), one line naming the
    objectives that do train on it."""
    examples = kind_named(kind).examples
    if trains:
        objective_named(objective).check_task(examples, "t")
        return
    with pytest.raises(ConfigurationError, match=r"^model\.objective: '\w+' trains on .*; use"):
        objective_named(objective).check_task(examples, "t")


def test_the_registry_names_each_objective_once_the_default_first():
    assert objective_names() == ("lm", "rank", "dpo", "grpo")
    assert [o.name for o in with_settings()] == ["dpo", "grpo"]
    names = r"\('lm', 'rank', 'dpo', 'grpo'\)"
    with pytest.raises(ConfigurationError, match=rf"expected one of {names}"):
        objective_named("mse")


def test_a_reference_comes_from_the_adapter_else_a_reference_step():
    """The one rule, asked of each objective: only `dpo` compares with a reference."""
    lora = {"type": "lora"}
    assert reference_from(None) is Reference.STEP
    assert reference_from(lora) is Reference.ADAPTER_OFF
    assert objective_named("dpo").reference(None) is Reference.STEP
    assert objective_named("dpo").reference(lora) is Reference.ADAPTER_OFF
    assert objective_named("lm").reference(lora) is None
    assert objective_named("rank").reference(None) is None


PREFERENCE = """local model = lib.models.tiny_gpt2 {{ adapter: {adapter} }};
lib.preference(lib.tasks.synthetic_preference, model, lib.engines.torch())
+ lib.preference_sweep(lib.tasks.synthetic_preference, model, lib.engines.torch(),
                       {{ beta: [0.1] }}, prefix='sweep_')"""


@pytest.mark.parametrize("adapter", [None, {"type": "lora"}])
def test_the_library_wires_the_reference_the_package_decides(tmp_path, adapter):
    """`lib.preference` and `lib.preference_sweep` train on a reference step's data, or on the
    data as loaded where the model's base with its adapter off is the reference: as
    `reference_from` says (the jsonnet cannot ask it)."""
    import json

    from .conftest import evaluate_library

    steps = evaluate_library(tmp_path, PREFERENCE.format(adapter=json.dumps(adapter)))["steps"]
    wanted = {Reference.STEP: "reference", Reference.ADAPTER_OFF: "data"}[reference_from(adapter)]
    assert steps["dpo_trained"]["dataset_dict"]["ref"] == "dpo_" + wanted
    assert steps["trained,sweep_beta=0.1"]["dataset_dict"]["ref"] == "sweep_" + wanted
    for name in ("dpo_trained", "trained,sweep_beta=0.1"):
        assert steps[name]["model"]["objective"] == "dpo"
