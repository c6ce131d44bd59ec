"""Values passed, not set afterwards (issue 58, item 4): a trained model's history and card,
the loop's step count and its `train_steps`, the model's `wrapping_root` and the run's
parallelism each reach their reader as a constructor's argument, a returned value or a declared
interface; measured with ast over catwalk_steps/, and by what a slot is started with. The one
loaded model is held by the workspace's step cache, not by a module."""

from __future__ import annotations

import ast
from pathlib import Path

from tango.step_graph import StepGraph

from catwalk_steps.module_names import ModuleNaming, wrapping_root
from catwalk_steps.parallel.scheduler import ParallelRun

PACKAGE = Path(__file__).resolve().parents[1] / "catwalk_steps"
# Attributes given to their object when it is built, never assigned to it afterwards.
PASSED = {"metrics_history", "run_card", "train_steps", "steps_taken"}


def assigned_afterwards(package: Path = PACKAGE) -> list[str]:
    """`file:line name` of each assignment to one of :data:`PASSED` that is not `self.name`
    in an `__init__`, and of each `getattr(..., "wrapping_root")`."""
    found = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text())
        inits = {
            id(node)
            for function in ast.walk(tree)
            if isinstance(function, ast.FunctionDef) and function.name == "__init__"
            for node in ast.walk(function)
        }
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in (t for top in targets for t in ast.walk(top)):
                if isinstance(target, ast.Attribute) and target.attr in PASSED:
                    mine = isinstance(target.value, ast.Name) and target.value.id == "self"
                    if not (mine and id(node) in inits):
                        found.append(f"{path.name}:{node.lineno} {target.attr}")
            asked = isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr"
            if asked and any(getattr(a, "value", None) == "wrapping_root" for a in node.args):
                found.append(f"{path.name}:{node.lineno} getattr wrapping_root")
    return found


def test_nothing_is_set_on_an_object_after_it_is_built():
    assert assigned_afterwards() == []


def test_the_measure_finds_a_value_set_afterwards(tmp_path):
    package = tmp_path / "catwalk_steps"
    package.mkdir()
    (package / "late.py").write_text(
        "class A:\n    def __init__(self):\n        self.run_card = None\n\n"
        "def trained(model, config):\n    model.run_card = {}\n    config.train_steps = 3\n"
        "    return getattr(model, 'wrapping_root', None)\n"
    )
    assert assigned_afterwards(package) == [
        "late.py:6 run_card",
        "late.py:7 train_steps",
        "late.py:8 getattr wrapping_root",
    ]


def test_a_model_declares_its_wrapping_root_by_its_interface():
    import torch

    from catwalk_steps.scoring.rank_classifier import RankClassifier

    assert issubclass(RankClassifier, ModuleNaming) and RankClassifier.wrapping_root == "lm"
    assert wrapping_root(torch.nn.Linear(1, 1)) is None  # a model that declares none


class Executor:
    """What a parallel run asks of its executor."""

    def __init__(self, parallelism: int):
        self.parallelism, self.include_package = parallelism, ()
        self.workspace = type("Workspace", (), {"url": "memory://"})()


def test_a_slot_is_started_with_the_runs_parallelism():
    """The executor's `--parallelism` reaches each slot in what it is started with (the slot
    puts it in its own environment, where the steps it runs read it: Tango gives a step no
    handle on its executor)."""
    run = ParallelRun(Executor(3), StepGraph({}), None)
    assert run.slot_settings("graph.jsonnet", threads=1).parallelism == 3


def test_the_held_model_belongs_to_its_workspace_not_to_the_process(tmp_path):
    """The one loaded model is held by the workspace's step cache and reached from it
    (`held_by`): two workspaces in one process hold their own; a workspace of another kind
    shares none (a holder of its own each time)."""
    from tango.workspaces import MemoryWorkspace

    from catwalk_steps.workspace.shared import SharedLocalWorkspace
    from catwalk_steps.workspace.step_cache import held_by

    one, two = SharedLocalWorkspace(tmp_path / "one"), SharedLocalWorkspace(tmp_path / "two")
    assert held_by(one) is held_by(one) and held_by(one) is not held_by(two)
    model = held_by(one).use("a", lambda: "weights", "a model")
    assert model == "weights" and held_by(one).get("a") == "weights"
    assert held_by(two).get("a") is None and held_by(two).loads == 0
    assert held_by(one).use("a", lambda: "again", "a model") == "weights"  # loaded once
    assert held_by(one).loads == 1
    held_by(one).release()
    assert held_by(one).get("a") is None and held_by(one).key is None
    memory = MemoryWorkspace()
    assert held_by(memory) is not held_by(memory)
