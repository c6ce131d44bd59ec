"""Typed settings (catwalk_steps/settings/): each lazy block read once, each default written
once, and the engine built with the modules it wraps."""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path
from types import SimpleNamespace

import pytest
from tango.common import Lazy, Params
from tango.common.exceptions import ConfigurationError
from tango.integrations.torch import DataLoader, Model, TrainConfig, TrainingEngine

from catwalk_steps.components import check_keys
from catwalk_steps.engines.wrapping import select_modules
from catwalk_steps.settings import (
    MAX_LENGTH,
    EngineSettings,
    EvaluationSettings,
    LoaderSettings,
    TrainSettings,
)
from catwalk_steps.training.job import Schedule

from .conftest import TINY_MODEL

PACKAGE = Path(__file__).resolve().parents[1] / "catwalk_steps"
BLOCKS = r"transformer\.h\.[0-9]+"


def lazy(base, config: dict) -> Lazy:
    return Lazy(base, Params(dict(config)))


def engine_block(**keys) -> Lazy:
    config = {"type": "catwalk::torch", "optimizer": {"type": "torch::AdamW", "lr": 1e-3}}
    return lazy(TrainingEngine, {**config, **keys})


def test_the_blocks_are_read_once_and_the_in_loop_loader_is_the_validation_one():
    train = lazy(DataLoader, {"batch_size": 2, "collate_fn": {"tokenizer": "catwalk::byte_level"}})
    validation = lazy(DataLoader, {"collate_fn": {"tokenizer": "t", "max_length": 64}})
    settings = TrainSettings(lazy(Model, TINY_MODEL), engine_block(precision="bf16"), {}, train)
    assert settings.blocks is settings.blocks  # read once, for every reader
    assert settings.blocks.engine.precision == "bf16"
    assert settings.blocks.model.params["tokenizer"] == "catwalk::byte_level"
    assert settings.blocks.in_loop.key == "train_dataloader"
    assert settings.blocks.in_loop.max_length == MAX_LENGTH  # the one default
    both = TrainSettings(
        lazy(Model, TINY_MODEL), engine_block(), {}, train, validation_dataloader=validation
    )
    assert (
        both.blocks.in_loop.collate_key("max_length")
        == "validation_dataloader.collate_fn.max_length"
    )
    assert both.blocks.in_loop.max_length == 64
    assert both.blocks.engine.precision == "fp32"


def test_the_engine_is_built_with_the_modules_the_job_chose(tmp_path):
    """The job's match (node 0's) reaches the engine as an argument: the engine does not match
    its own (a pattern it could not match would fail here)."""
    model = lazy(Model, TINY_MODEL)
    config = TrainConfig(step_id="t", work_dir=tmp_path, worker_id=0, devices=[-1])
    block = engine_block(activation_checkpointing=True, modules_to_wrap=["nothing"])
    engine = block.construct(train_config=config, model=model, inner_modules=["lm.transformer.h.1"])
    assert engine.inner_modules(engine.model) == ["lm.transformer.h.1"]
    own = engine_block(activation_checkpointing=True, modules_to_wrap=[BLOCKS])
    engine = own.construct(train_config=config, model=model)
    assert engine.inner_modules(engine.model) == select_modules(engine.model, [BLOCKS], "k")


def test_inner_modules_is_not_a_config_key():
    from catwalk_steps.engines import CatwalkTorchEngine

    with pytest.raises(ConfigurationError, match="training_engine.inner_modules: "):
        check_keys(CatwalkTorchEngine, {"inner_modules": []}, "training_engine")


DEFAULTED = {"max_length", "device_count", "precision", "rendezvous_timeout"}


def literal_defaults(path: Path) -> list[str]:
    """Where a setting's default is written as a literal: a parameter's default, or
    `.get(key, literal)`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            positional = node.args.posonlyargs + node.args.args
            args = positional + node.args.kwonlyargs
            defaults = [None] * (len(positional) - len(node.args.defaults))
            defaults += node.args.defaults + node.args.kw_defaults
            for arg, default in zip(args, defaults, strict=True):
                literal = isinstance(default, ast.Constant) and default.value is not None
                if arg.arg in DEFAULTED and literal:
                    found.append(f"{path.name}:{node.lineno} {arg.arg}")
        call = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        if call and node.func.attr == "get" and len(node.args) == 2:
            key, default = node.args
            named = isinstance(key, ast.Constant) and key.value in DEFAULTED
            if named and isinstance(default, ast.Constant):
                found.append(f"{path.name}:{node.lineno} {key.value}")
    return found


def test_each_default_is_written_once_in_the_settings():
    written = [
        place
        for path in sorted(PACKAGE.rglob("*.py"))
        if "settings" not in path.relative_to(PACKAGE).parts
        for place in literal_defaults(path)
    ]
    assert written == []


def train_settings(**keys) -> TrainSettings:
    loader = lazy(DataLoader, {"batch_size": 2})
    return TrainSettings(lazy(Model, TINY_MODEL), engine_block(), {}, loader, **keys)


def test_the_schedule_is_the_training_settings_resolved():
    """`Schedule` declares no key of its own (each is declared and defaulted once, in
    `TrainSettings`): only what the job resolves, the validation metric's name, is narrowed."""
    assert [f.name for f in fields(Schedule)] == [f.name for f in fields(TrainSettings)]
    assert set(vars(Schedule)["__annotations__"]) == {"val_metric_name"}
    settings = train_settings(train_steps=8, log_every=3, val_metric_name=None)
    schedule = Schedule.of(settings, "acc")
    assert schedule.val_metric_name == "acc" and schedule.log_every == 3
    assert [schedule.logs(step) for step in range(8)] == [1, 0, 1, 0, 0, 1, 0, 1]


OWN_RULES = {  # each settings object's own rules, asked of it alone: the graph-build lines
    "train": (
        lambda: train_settings(train_steps=2, grad_accum=0).check(),
        "train.grad_accum: must be a whole number >= 1, got 0",
    ),
    "validate_every": (
        lambda: train_settings(train_steps=2, validate_every=3, checkpoint_every=2).check(),
        "train.checkpoint_every: 2 must be a multiple or a divisor of validate_every (3), so "
        "that the best checkpoint is one that exists",
    ),
    "evaluate_tasks": (
        lambda: train_settings(
            evaluate_tasks=[SimpleNamespace(name="copa"), SimpleNamespace(name="copa")]
        ).check_evaluate_tasks(),
        "train.evaluate_tasks: 'copa' is given 2 times; give each task once",
    ),
    "engine": (
        lambda: EngineSettings.of(
            engine_block(optimizer={"type": "torch::AdamW", "lr": 0})
        ).check(),
        "training_engine.optimizer.lr: 0 changes no weight; give a learning rate > 0",
    ),
    "evaluation engine": (
        lambda: EngineSettings.of(engine_block(), "evaluate.engine").check(trains=False),
        "evaluate.engine.optimizer: an evaluation trains nothing; leave it out",
    ),
    "loader": (
        lambda: LoaderSettings.of(lazy(DataLoader, {"batch_size": 0}), "train_dataloader").check(),
        "train_dataloader.batch_size: must be a whole number >= 1, got 0",
    ),
    "evaluation": (
        lambda: EvaluationSettings(rendezvous_timeout=0).check(),
        "evaluate.rendezvous_timeout: seconds > 0, got 0",
    ),
}


@pytest.mark.parametrize("case", OWN_RULES)
def test_each_settings_object_checks_its_own_values_in_one_line(case):
    check, message = OWN_RULES[case]
    with pytest.raises(ConfigurationError) as error:
        check()
    assert str(error.value) == message
