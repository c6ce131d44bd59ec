"""A model directory that does not hold what it promises fails in one line naming the file,
before any forward: at graph build when the directory is named in the config, and in every
weight reader (one device, whole copies, FairScale, FSDP2's rank-wise rows) when it is not
known until the step runs (a step's result). Nothing is cached from it."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
from tango.common import Lazy, Params
from tango.common.exceptions import ConfigurationError

from catwalk_steps.model_files import DamagedModelError, check_model_directory
from catwalk_steps.scoring.rank_classifier import RankClassifier

from . import commands
from .commands import error_lines
from .conftest import EXPERIMENTS, TINY_DEMO, TINY_GPT2, step_result, tango_command

DEMO = EXPERIMENTS / "demo.jsonnet"


def saved(directory: Path, config: dict = TINY_GPT2) -> Path:
    model = RankClassifier(config=config, tokenizer="catwalk::byte_level")
    model.save_pretrained(directory)
    return directory


def cut_in_half(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory) -> tuple[Path, Path]:
    """(intact, cut): the same tiny model, its `model.safetensors` cut to half in the second."""
    root = tmp_path_factory.mktemp("models")
    intact, cut = saved(root / "intact"), saved(root / "cut")
    cut_in_half(cut / "model.safetensors")
    return intact, cut


def test_a_cut_file_is_named_with_what_is_missing(model_dirs):
    intact, cut = model_dirs
    check_model_directory(str(intact))
    with pytest.raises(DamagedModelError) as error:
        check_model_directory(str(cut))
    line = str(error.value)
    size = (cut / "model.safetensors").stat().st_size
    whole = (intact / "model.safetensors").stat().st_size
    assert line.startswith(
        f"{cut / 'model.safetensors'}: cut short: {size} of the {whole} bytes its header promises; "
    )
    assert "tensors are missing or partial (the first: '" in line and "\n" not in line


def test_every_kind_of_damage_is_one_line_naming_the_file(tmp_path):
    def damaged(make) -> str:
        directory = saved(tmp_path / f"m{len(list(tmp_path.iterdir()))}")
        make(directory)
        with pytest.raises((DamagedModelError, ConfigurationError)) as error:
            check_model_directory(str(directory))
        assert "\n" not in str(error.value)
        return str(error.value)

    def header_length(d):
        f = d / "model.safetensors"
        f.write_bytes((10**9).to_bytes(8, "little") + f.read_bytes()[8:])

    def sharded(d):
        index = {"weight_map": {"a": "model-00001-of-00002.safetensors"}}
        (d / "model.safetensors.index.json").write_text(json.dumps(index))
        (d / "model.safetensors").unlink()

    def bin_only(d):
        (d / "model.safetensors").unlink()
        (d / "pytorch_model.bin").write_bytes(b"PK\x03\x04 not a whole archive")

    assert "less than its 1000000008-byte header" in damaged(header_length)
    assert "names model-00001-of-00002.safetensors, which is missing" in damaged(sharded)
    assert "pytorch_model.bin: not a whole torch file" in damaged(bin_only)
    assert damaged(lambda d: (d / "model.safetensors").unlink()).endswith(
        "no weights there (none of model.safetensors, model.safetensors.index.json, "
        "pytorch_model.bin, pytorch_model.bin.index.json)"
    )
    assert damaged(lambda d: (d / "config.json").write_text("{not json")).startswith(
        f"{tmp_path}/m4/config.json: not JSON ("
    )


def test_one_device_whole_copies_and_fairscale_read_through_the_check(model_dirs):
    """Their reader is transformers' `from_pretrained`, behind `build_causal_lm`."""
    _, cut = model_dirs
    with pytest.raises(DamagedModelError, match="model.safetensors: cut short"):
        RankClassifier(pretrained=str(cut))


@pytest.mark.distributed
@pytest.mark.parametrize(
    "engine",
    [None, {"type": "catwalk::torch_fsdp"}, {"type": "catwalk::fairscale"}],
    ids=["whole copies", "fsdp2 rows", "fairscale"],
)
def test_every_worker_reader_refuses_a_cut_file_before_any_forward(tmp_path, model_dirs, engine):
    """The directory as a step's result is known only when the step runs: each worker's reader
    checks it. (FSDP2 read it rank-wise and scored NaN before.)"""
    from tango.integrations.torch import TrainingEngine

    from catwalk_steps.evaluation import ConfiguredModel, EvaluationSettings, evaluation_scores
    from catwalk_steps.tasks import SyntheticTask

    _, cut = model_dirs
    source = ConfiguredModel({"type": "catwalk::rank_classifier", "pretrained": str(cut)})
    instances = SyntheticTask(seed=1, sizes={"validation": 4}).load(["validation"])["validation"]
    lazy = None if engine is None else Lazy(TrainingEngine, Params(engine))
    settings = EvaluationSettings(batch_size=2, device="cpu", device_count=2, engine=lazy)
    step = SimpleNamespace(unique_id="evaluate-cut", name="evaluate", work_dir=tmp_path / "w")
    with pytest.raises(DamagedModelError) as error:
        evaluation_scores(source, instances, settings, step, logging.getLogger())
    assert f"{cut / 'model.safetensors'}: cut short" in str(error.value)


# --- Through `tango run` ------------------------------------------------------------------------

T = "steps.trained"
TINY_RUN = TINY_DEMO
# (DDP's graph-build check is theirs: one check of the directory, whatever the engine.)
ENGINES = {
    "fairscale": {"type": "catwalk::fairscale", "optimizer": {"type": "torch::AdamW", "lr": 1e-3}},
    "fsdp2": {"type": "catwalk::torch_fsdp", "optimizer": {"type": "torch::AdamW", "lr": 1e-3}},
}


@pytest.mark.slow
def test_through_tango_run_a_cut_file_is_one_line_and_never_a_cached_score(tmp_path, model_dirs):
    """Named in the config: one line at graph build, under every engine, training or evaluating.
    A step's result cut after it was written: one line from each reader when the step runs,
    and no evaluation result is cached."""
    _, cut = model_dirs
    model = {"type": "catwalk::rank_classifier", "pretrained": str(cut)}
    cases = {
        f"train_{name}": {**TINY_RUN, f"{T}.device_count": 2, f"{T}.model": model,
                          f"{T}.training_engine": engine}
        for name, engine in ENGINES.items()
    }  # fmt: skip
    cases["evaluate"] = {"steps.eval_untrained.model": model}
    started = {}
    for name, overrides in cases.items():
        out = tmp_path / f"{name}.txt"
        argv = tango_command(DEMO, tmp_path / name, name, overrides)
        started[name] = (commands.start(argv, out), out)
    for name, (command, out) in started.items():
        assert command.wait(180) == 1, name
        text = out.read_text()
        lines = error_lines(text)
        assert len(lines) == 1, (name, text[-3000:])
        assert f"DamagedModelError: {cut / 'model.safetensors'}: cut short" in lines[0], name
        assert 'Starting step "' not in text, name  # at graph build

    workspace = tmp_path / "ws"
    done = commands.run(tango_command(DEMO, workspace, "good", TINY_RUN), timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    trained = step_result(workspace, "good", "trained")
    cut_in_half(trained / "model.safetensors")
    readers = {
        "one_device": {},
        "whole_copies": {"device_count": 2},
        "fsdp2": {"device_count": 2, "engine": {"type": "catwalk::torch_fsdp"}},
        "fairscale": {"device_count": 2, "engine": {"type": "catwalk::fairscale"}},
    }
    started = {}
    for name, settings in readers.items():
        overrides = {**TINY_RUN, **{f"steps.eval_trained.{k}": v for k, v in settings.items()}}
        overrides["steps.eval_trained.max_length"] = 64  # a step of its own, not the cached one
        out = tmp_path / f"{name}.txt"
        started[name] = (commands.start(tango_command(DEMO, workspace, name, overrides), out), out)
    for name, (command, out) in started.items():
        assert command.wait(300) == 1, (name, out.read_text()[-3000:])
        lines = error_lines(out.read_text())
        assert len(lines) == 1, (name, lines or out.read_text()[-3000:])
        assert f"{trained / 'model.safetensors'}: cut short" in lines[0], name
    evaluations = sorted(workspace.glob("cache/Evaluate-*/data.json"))
    assert len(evaluations) == 2, evaluations  # the good run's two, nothing since


def custom_code_model(directory: Path, marker: Path) -> Path:
    """A model whose config names code of its own (`auto_map`) that would touch `marker`."""
    saved(directory)
    config = json.loads((directory / "config.json").read_text())
    config["model_type"] = "catwalk_test_custom"
    config["auto_map"] = {"AutoConfig": "custom.Config", "AutoModelForCausalLM": "custom.Model"}
    (directory / "config.json").write_text(json.dumps(config))
    (directory / "custom.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n"
        "from transformers import GPT2Config as Config, GPT2LMHeadModel as Model\n"
    )
    return directory


@pytest.mark.slow
def test_through_tango_run_what_a_directory_lacks_is_one_line_at_graph_build(tmp_path):
    """A path that does not exist, a config.json that does not parse, no weights, a model that
    needs its own code: each one line naming it before any step runs, training or evaluating,
    never transformers' "[y/N]" prompt, and the model's code never runs."""
    marker = tmp_path / "custom code ran"
    bad_config = saved(tmp_path / "bad_config")
    (bad_config / "config.json").write_text('{"model_type": "gpt2",')
    no_weights = saved(tmp_path / "no_weights")
    (no_weights / "model.safetensors").unlink()
    custom = custom_code_model(tmp_path / "custom", marker)
    missing = tmp_path / "missing"
    expected = {
        "missing": f"model.pretrained '{missing}': no such file or directory",
        "bad_config": f"ConfigurationError: {bad_config / 'config.json'}: not JSON (",
        "no_weights": f"model.pretrained '{no_weights}': no weights there (none of",
        "custom": f"model.pretrained '{custom}': needs trust_remote_code",
    }
    paths = {"missing": missing, "bad_config": bad_config, "no_weights": no_weights}
    paths["custom"] = custom
    started = {}
    for name, path in paths.items():
        model = {"type": "catwalk::rank_classifier", "pretrained": str(path)}
        for where, overrides in (
            ("train", {f"{T}.model": model}),
            ("evaluate", {"steps.eval_untrained.model": model}),
        ):
            out = tmp_path / f"{name}_{where}.txt"
            argv = tango_command(DEMO, tmp_path / "ws", f"{name}_{where}", overrides)
            started[name, where] = (commands.start(argv, out), out)
    for (name, where), (command, out) in started.items():
        assert command.wait(180) == 1, (name, where)
        text = out.read_text()
        lines = error_lines(text)
        assert len(lines) == 1 and expected[name] in lines[0], (name, where, lines or text[-2000:])
        assert 'Starting step "' not in text and "[y/N]" not in text, (name, where)
    assert not marker.exists()
