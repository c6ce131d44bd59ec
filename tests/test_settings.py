"""Typed settings (catwalk_steps/settings/): each lazy block read once, each default written
once, and the engine built with the modules it wraps."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from tango.common import Lazy, Params
from tango.common.exceptions import ConfigurationError
from tango.integrations.torch import DataLoader, Model, TrainConfig, TrainingEngine

from catwalk_steps.components import check_keys
from catwalk_steps.engines.wrapping import select_modules
from catwalk_steps.settings import MAX_LENGTH, TrainSettings

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
