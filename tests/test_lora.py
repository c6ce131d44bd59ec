"""LoRA adapters (peft): the model block's `adapter`, checked at graph build; every engine trains
the adapter alone (the base bitwise unchanged) to the demo's accuracy; checkpoints hold the
adapter and resume bit for bit; the result loads with transformers (merged) and peft (adapter)
in a fresh process and scores what the run reported; in-loop scores equal a separate evaluation
of the saved result. (Bad adapters through `tango run`: test_one_line_through_tango_run.)"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch
from tango.common.exceptions import ConfigurationError

from catwalk_steps.adapters.lora import ADAPTER as LORA
from catwalk_steps.adapters.registry import is_adapter_weight, parse_adapter
from catwalk_steps.checkpoints.discovery import best_checkpoint, complete_checkpoints
from catwalk_steps.checkpoints.manifest import read_manifest
from catwalk_steps.checkpoints.weights import full_model_state
from catwalk_steps.engines.wrapping import check_uniform_units, trainable_units
from catwalk_steps.scoring.rank_classifier import RankClassifier

from .adapter_results import assert_scores_what_the_run_reported, scored_in_a_fresh_process
from .conftest import REPO, TINY_GPT2, history, run_tango, step_result

FIXTURE = REPO / "tests" / "fixtures" / "lora.jsonnet"
TINY_LLAMA = {
    "model_type": "llama",
    "num_hidden_layers": 2,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "max_position_embeddings": 64,
}
PROJECTIONS = [r".*\.(c_attn|c_proj|c_fc)"]
RUNS = ("ddp", "fairscale", "fsdp2", "llama")


def classifier(config=TINY_GPT2, **adapter) -> RankClassifier:
    spec = {"type": "lora", **adapter} if adapter else None
    return RankClassifier(config=config, tokenizer="catwalk::byte_level", adapter=spec)


# --- The block, checked --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"type": "lora", "r": 0}, "model.adapter.r: the adapter's rank, an integer > 0, got 0"),
        ({"type": "lora", "r": 2.5}, "model.adapter.r: the adapter's rank"),
        ({"type": "lora", "alpha": -1}, "model.adapter.alpha: a number > 0"),
        ({"type": "lora", "dropout": 1.0}, "model.adapter.dropout: a number in [0, 1)"),
        ({"type": "lora", "target_modules": []}, "model.adapter.target_modules: a non-empty"),
        ({"type": "lora", "target_modules": ["("]}, "model.adapter.target_modules: invalid"),
        ({"type": "lora", "alpah": 4}, "model.adapter.alpah: LoRA has no such key; did you mean"),
        ({"type": "loha"}, "model.adapter.type: one of ['ia3', 'lora'], got 'loha'"),
        ([8], "model.adapter: a block such as"),
    ],
)
def test_a_bad_adapter_block_is_one_line_naming_its_key(block, message):
    with pytest.raises(ConfigurationError, match=None) as raised:
        parse_adapter(block)
    assert str(raised.value).startswith(message), str(raised.value)
    assert "\n" not in str(raised.value)


def test_targets_are_matched_as_modules_to_wrap_matches_them():
    with pytest.raises(ConfigurationError, match=r"pattern 'nothing' matches no module; closest"):
        classifier(target_modules=["nothing"])
    with pytest.raises(ConfigurationError, match=r"matches transformer.h.0.attn \(GPT2Attention\)"):
        classifier(target_modules=[r".*\.attn"])
    with pytest.raises(ConfigurationError, match="mixes transformers Conv1D layers"):
        classifier(target_modules=[r".*\.c_attn", "lm_head"])
    written_both_ways = {
        n
        for n, p in classifier(
            target_modules=[r"lm\.transformer\.h\.0\.attn\.c_attn"]
        ).named_parameters()
        if p.requires_grad
    }
    assert written_both_ways == {
        n
        for n, p in classifier(
            target_modules=[r"transformer\.h\.0\.attn\.c_attn"]
        ).named_parameters()
        if p.requires_grad
    }
    assert len(written_both_ways) == 2  # lora_A and lora_B of the one layer


def test_left_out_targets_are_peft_s_defaults_for_the_family():
    gpt2 = {n for n, p in classifier(r=4).named_parameters() if p.requires_grad}
    assert {n.split(".lora_")[0] for n in gpt2} == {
        f"lm.transformer.h.{i}.attn.c_attn" for i in (0, 1)
    }
    llama = {n for n, p in classifier(TINY_LLAMA, r=4).named_parameters() if p.requires_grad}
    assert {n.split(".lora_")[0].rsplit(".", 1)[1] for n in llama} == {"q_proj", "v_proj"}


def test_only_the_adapter_trains_and_the_model_starts_as_its_base():
    base, adapted = classifier(), classifier(r=4, target_modules=PROJECTIONS)
    trainable = [n for n, p in adapted.named_parameters() if p.requires_grad]
    assert trainable and all(is_adapter_weight(n) for n in trainable)
    assert adapted.trainable_parameters == sum(
        p.numel() for n, p in adapted.named_parameters() if is_adapter_weight(n)
    )
    ids = torch.randint(0, 250, (2, 12))
    with torch.no_grad():
        assert torch.equal(base.eval().lm(ids).logits, adapted.eval().lm(ids).logits)  # B = 0
    again = classifier(r=4, target_modules=PROJECTIONS)
    for name, value in adapted.state_dict().items():
        assert torch.equal(value, again.state_dict()[name]), name  # drawn from init_seed


def test_the_merged_model_is_the_adapter_model():
    """Equal up to float32 rounding (W + BA against W x + B(A x)), relative to the logits; drawn
    from a generator of its own, so the tests run before it change nothing."""
    generator = torch.Generator().manual_seed(0)
    adapted = classifier(r=4, target_modules=PROJECTIONS).eval()
    with torch.no_grad():
        for name, parameter in adapted.lm.named_parameters():
            if ".lora_B." in name:
                parameter.normal_(std=0.5, generator=generator)
    merged = classifier().eval()
    merged.lm.load_state_dict(LORA.merged_state(adapted.lm))
    ids = torch.randint(0, 250, (3, 16), generator=generator)
    with torch.no_grad():
        logits = adapted.lm(ids).logits
        difference = (merged.lm(ids).logits - logits).abs().max()
    assert difference < 1e-5 * logits.abs().max()


def test_an_adapter_weight_is_drawn_alone_as_every_rank_draws_it():
    shapes = [("a.lora_A.default.weight", torch.Size([4, 8])), ("a.lora_B.default.weight", (8, 4))]
    one, other = LORA.initial_weights(shapes, seed=3), LORA.initial_weights(shapes[:1], seed=3)
    assert torch.equal(one["a.lora_A.default.weight"], other["a.lora_A.default.weight"])
    assert not one["a.lora_B.default.weight"].any()
    assert not torch.equal(
        one["a.lora_A.default.weight"], LORA.initial_weights(shapes, 4)["a.lora_A.default.weight"]
    )


def test_fairscale_units_are_arranged_so_each_is_all_trained_or_all_frozen():
    adapted = classifier(r=4, target_modules=PROJECTIONS)
    blocks = ["lm.transformer.h.1", "lm.transformer.h.0"]
    with pytest.raises(ConfigurationError, match=r"unit lm.transformer.h.1 holds both trained"):
        check_uniform_units(adapted, blocks, "training_engine.modules_to_wrap")
    units = trainable_units(adapted)
    assert units and all(u.endswith((".lora_A.default", ".lora_B.default")) for u in units)
    check_uniform_units(adapted, [*units, *blocks], "training_engine.modules_to_wrap")
    assert trainable_units(classifier()) == []  # nothing frozen: units as before


# --- Trained under every engine (tests/fixtures/lora.jsonnet) ------------------------------


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory, request) -> Path:
    from .conftest import once_per_session

    return once_per_session(
        tmp_path_factory, request, "lora", lambda w: run_tango(FIXTURE, w, "lora", timeout=900)
    )


@pytest.fixture(scope="module")
def fresh_scores(lora_run) -> dict:
    """The results of two runs scored as a user outside the package scores them, in one fresh
    process: merged (transformers) and as the base with the peft adapter."""
    return scored_in_a_fresh_process(lora_run, "lora", ["fairscale", "llama"])


def work_dir(workspace: Path, run: str) -> Path:
    return step_result(workspace, "lora", run) / "work"


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("run", RUNS)
def test_every_engine_trains_the_adapter_to_the_demo_s_accuracy_with_the_base_unchanged(
    lora_run, run
):
    validations = history(lora_run, "lora", run)["validation"]
    assert max(v["acc"] for v in validations) >= 0.9, validations
    checked = json.loads((work_dir(lora_run, run) / "base_unchanged.json").read_text())
    assert checked["compared"] > 10  # every base weight, gathered whole, bitwise as built


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("engine", ["ddp", "fairscale", "fsdp2"])
def test_bf16_clipping_accumulation_and_recomputation_train_adapters(lora_run, engine):
    run = f"options_{engine}"
    losses = [e["loss"] for e in history(lora_run, "lora", run)["train"]]
    assert len(losses) == 12 and all(math.isfinite(loss) for loss in losses)
    assert losses[-1] < losses[0]
    assert json.loads((work_dir(lora_run, run) / "base_unchanged.json").read_text())["compared"]
    saved = full_model_state(best_checkpoint(work_dir(lora_run, run)))
    assert any(v.abs().sum() > 0 for n, v in saved.items() if ".lora_B." in n)


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("run", RUNS)
def test_checkpoints_hold_the_adapter_and_name_the_base(lora_run, run):
    checkpoint = best_checkpoint(work_dir(lora_run, run))
    saved = full_model_state(checkpoint)
    assert saved and all(is_adapter_weight(name) for name in saved), sorted(saved)[:3]
    base = read_manifest(checkpoint)["base"]["spec"]
    assert base["config"]["model_type"] == ("llama" if run == "llama" else "gpt2")
    assert "adapter" not in base


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("run", ["fairscale", "llama"])
def test_the_result_loads_with_transformers_and_peft_and_scores_what_the_run_reported(
    lora_run, fresh_scores, run
):
    result = step_result(lora_run, "lora", run)
    info = json.loads((result / "catwalk_model.json").read_text())
    scored = fresh_scores[run]
    reported = info["metrics_history"]["validation"][-1]["acc"]  # in the loop, adapters on
    evaluated = json.loads((step_result(lora_run, "lora", f"eval_{run}") / "data.json").read_text())
    assert_scores_what_the_run_reported(scored, reported, evaluated["acc"])
    config = json.loads((result / "adapter" / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["r"] == 8


@pytest.mark.slow
@pytest.mark.distributed
def test_catwalk_export_writes_the_merged_model_or_the_adapter_alone(lora_run, tmp_path):
    from safetensors.torch import load_file

    from . import commands

    export = Path(sys.executable).with_name("catwalk-export")
    work = work_dir(lora_run, "fsdp2")
    done = commands.run([str(export), str(work), str(tmp_path / "merged")])
    assert done.returncode == 0, done.stderr
    result = step_result(lora_run, "lora", "fsdp2")
    exported = load_file(tmp_path / "merged" / "model.safetensors")
    for name, value in load_file(result / "model.safetensors").items():
        assert torch.equal(exported[name], value), name  # the best checkpoint, as the result
    assert (tmp_path / "merged" / "adapter" / "adapter_model.safetensors").is_file()
    done = commands.run([str(export), str(work), str(tmp_path / "adapter"), "--adapter"])
    assert done.returncode == 0, done.stderr
    assert "PeftModel.from_pretrained(base" in done.stdout + done.stderr
    assert sorted(p.name for p in (tmp_path / "adapter").iterdir()) == [
        "adapter_config.json",
        "adapter_model.safetensors",
    ]
    same = load_file(tmp_path / "adapter" / "adapter_model.safetensors")
    assert same.keys() == load_file(result / "adapter" / "adapter_model.safetensors").keys()


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("run", RUNS[:3])
def test_in_loop_scores_with_adapters_equal_evaluate_on_the_saved_result(lora_run, run):
    """Multiple choice, an ai2-olmo-eval label and a generative task, scored in the loop with
    the adapter (unmerged, on 2 ranks) and by catwalk::evaluate of the saved (merged) model."""
    tasks = history(lora_run, "lora", run)["tasks"]
    for task, points in tasks.items():
        in_loop = points[-1]  # the trained model's: the last validation
        evaluated = json.loads(
            (step_result(lora_run, "lora", f"suite,{task},{run}") / "data.json").read_text()
        )
        assert evaluated["n"] == in_loop["count"], task
        for key, value in in_loop.items():
            if key in ("step", "count"):
                continue
            if key.startswith(("acc", "exact_match", "f1")) and "_stderr" not in key:
                assert evaluated[key] == value, (task, key)  # (a stderr: from sums in the loop)
            else:
                assert evaluated[key] == pytest.approx(value, rel=1e-5), (task, key)


@pytest.mark.slow
@pytest.mark.distributed
def test_the_run_card_and_the_report_say_an_adapter_was_trained(lora_run):
    card = json.loads((step_result(lora_run, "lora", "ddp") / "catwalk_model.json").read_text())[
        "run_card"
    ]
    trained = card["trained"]
    assert trained["adapter"]["r"] == 8 and trained["adapter"]["type"] == "lora"
    assert 0 < trained["trainable_parameters"] < trained["parameters"]
    report = (step_result(lora_run, "lora", "suite_report") / "report.md").read_text()
    assert f"LoRA r=8 alpha=16: {trained['trainable_parameters']:,} of" in report


# --- Resume ---------------------------------------------------------------------------------


def lora_job(work, engine_block, init_seed=0, dropout=True, **kwargs):
    """A small adapter job; with dropout in the base and the adapter, every generator matters
    (on another device count, ranks draw otherwise: without)."""
    from .training import engine, job, model_spec

    adapter = {"type": "lora", "r": 4, "dropout": 0.1 if dropout else 0.0}
    spec = {**model_spec(dropout=dropout), "adapter": adapter}
    spec["init_seed"] = init_seed
    optimizer = {"type": "torch::AdamW", "lr": 1e-2}
    return job(work, engine_block=engine(engine_block, optimizer=optimizer), model=spec, **kwargs)


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("engine_type", ["catwalk::fairscale", "catwalk::torch_fsdp"])
def test_a_killed_adapter_run_resumes_bit_for_bit(tmp_path, engine_type):
    """Dropout in the base and the adapter (every generator matters): killed after the
    checkpoint of step 4, rerun, it ends with the adapter weights of an uninterrupted run, byte
    for byte; FairScale consolidates the adapter's optimizer state (ZeRO) with a frozen base."""
    from catwalk_steps.launch.launcher import run_training

    from .training import kill_at, reproducible, weights

    uninterrupted = lora_job(tmp_path / "u", engine_type)
    run_training(uninterrupted)
    killed = lora_job(tmp_path / "k", engine_type, callbacks=[kill_at(6, 1, tmp_path / "f")])
    with pytest.raises(Exception, match="rank 1 died: killed by SIGKILL"):
        run_training(killed)
    assert len(complete_checkpoints(killed.work_dir)) == 1
    run_training(killed)
    assert reproducible(history_of(killed.work_dir)) == reproducible(
        history_of(uninterrupted.work_dir)
    )
    final, expected = weights(killed.work_dir), weights(uninterrupted.work_dir)
    assert final.keys() == expected.keys() and all(is_adapter_weight(n) for n in final)
    for name, value in expected.items():
        assert torch.equal(final[name], value), name
    changed = [n for n, v in expected.items() if ".lora_B." in n and v.abs().sum() > 0]
    assert changed  # the adapter trained


@pytest.mark.slow
def test_catwalk_export_follows_the_latest_and_best_pointers(tmp_path):
    """`catwalk-export <work>/checkpoints/latest OUT --adapter` exports the checkpoint the
    pointer names (it said "no complete checkpoint": the pointer was taken for a work
    directory); a pointer that names no checkpoint is one line."""
    from catwalk_steps.checkpoints import resolve_checkpoint
    from catwalk_steps.checkpoints.layout import checkpoint_dir, checkpoints_root
    from catwalk_steps.launch.launcher import run_training

    from . import commands

    run = lora_job(tmp_path / "run", "catwalk::torch", device_count=1, train_steps=4)
    run_training(run)
    root = checkpoints_root(run.work_dir)
    export = str(Path(sys.executable).with_name("catwalk-export"))
    done = commands.run([export, str(root / "latest"), str(tmp_path / "out"), "--adapter"])
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "adapter_config.json",
        "adapter_model.safetensors",
    ]
    assert resolve_checkpoint(root / "best") == checkpoint_dir(run.work_dir, 4)
    (root / "latest").write_text("../../elsewhere\n")
    done = commands.run([export, str(root / "latest"), str(tmp_path / "bad")])
    assert done.returncode == 1 and done.stderr.strip() == (
        f"catwalk-export: CheckpointError: {root / 'latest'}: a pointer naming '../../elsewhere', "
        "not a checkpoint"
    )


def history_of(work: Path) -> dict:
    from .training import history as job_history

    return job_history(work)


@pytest.mark.slow
@pytest.mark.distributed
def test_an_adapter_run_resumes_on_another_device_count_and_refuses_another_base(tmp_path):
    from catwalk_steps.checkpoints.layout import checkpoint_dir
    from catwalk_steps.launch.launcher import run_training

    two = lora_job(tmp_path / "two", "catwalk::fairscale", dropout=False, keep_checkpoints=True)
    run_training(two)
    halfway = checkpoint_dir(two.work_dir, 4)
    one = lora_job(
        tmp_path / "one", "catwalk::fairscale", dropout=False, device_count=1, resume_from=halfway
    )
    run_training(one)
    losses = [e["loss"] for e in history_of(one.work_dir)["train"]]
    assert losses == pytest.approx([e["loss"] for e in history_of(two.work_dir)["train"]], rel=1e-5)
    other_base = lora_job(  # another random base: not the one the adapter was trained on
        tmp_path / "other", "catwalk::fairscale", dropout=False, init_seed=5, resume_from=halfway
    )
    with pytest.raises(Exception, match="its adapter was trained on another base"):
        run_training(other_base)
    assert not complete_checkpoints(other_base.work_dir)
    from .training import engine, job

    whole = job(tmp_path / "whole", engine_block=engine("catwalk::fairscale"), resume_from=halfway)
    with pytest.raises(Exception, match="holds an adapter, but this run trains the whole model"):
        run_training(whole)


# --- Sweeps ---------------------------------------------------------------------------------


def test_the_lora_sweep_sets_each_cell_s_adapter_and_evaluates_the_base_once():
    from .conftest import EXPERIMENTS, experiment_params

    steps = experiment_params(EXPERIMENTS / "sweep_lora.jsonnet", ranks="2,8", lrs="0.01,0.02")[
        "steps"
    ]
    trained = {name: step for name, step in steps.items() if name.startswith("trained,")}
    assert len(trained) == 4
    for name, step in trained.items():
        cell = dict(part.split("=") for part in name.removeprefix("trained,").split(","))
        assert step["model"]["adapter"]["r"] == int(cell["r"])
        assert step["training_engine"]["optimizer"]["lr"] == float(cell["lr"])
        assert "r" not in step and "alpha" not in step  # not training keys
    [untrained] = [name for name in steps if name.startswith("eval_untrained")]
    assert "adapter" not in steps[untrained]["model"]  # the base, once for every cell
    assert set(steps["report"]["metrics"]) == {
        *(n.removeprefix("trained,") for n in trained),
        untrained.removeprefix("eval_"),
    }


def test_an_adapter_grid_key_without_an_adapter_is_one_line(tmp_path):
    from .conftest import evaluate_library

    with pytest.raises(Exception, match="sweep grid key r: the model block has no adapter"):
        evaluate_library(
            tmp_path,
            "lib.sweep(task=lib.tasks.synthetic, grid={r: [4]}, engines={ddp: lib.engines.torch()},"
            " models={tiny: lib.models.tiny_gpt2}).steps",
        )


@pytest.mark.slow
def test_a_lora_sweep_runs_and_reports_what_each_cell_trained(tmp_path):

    sweep = tmp_path / "sweep.jsonnet"
    sweep.write_text(
        "local lib = import 'lib/pipeline.libsonnet';\n"
        "lib.sweep(task=lib.tasks.synthetic { sizes: { train: 32, validation: 8 } },\n"
        "  grid={ r: [2, 4] }, engines={ ddp: lib.engines.torch() },\n"
        "  models={ tiny: lib.models.tiny_gpt2 { adapter: lib.models.lora() } },\n"
        "  training=lib.training.lora_demo { device_count: 1, train_steps: 4, validate_every: 4,"
        " batch_size: 4, eval_batch_size: 8 })\n"
    )
    workspace = tmp_path / "workspace"
    run_tango(sweep, workspace, "sweep")
    report = (step_result(workspace, "sweep", "report") / "report.md").read_text()
    for r in (2, 4):
        assert f"LoRA r={r} alpha=16: " in report
    assert len(list(workspace.glob("cache/Evaluate-*"))) == 3  # 2 cells and the base once


@pytest.mark.slow
@pytest.mark.distributed
def test_fsdp2_reads_its_rows_of_a_local_base_and_a_changed_base_is_refused(tmp_path):
    """A pretrained base in a local directory: FSDP2's ranks read their own rows of it and
    draw the adapter's rows (no rank builds the whole model), and train as DDP, which loads
    the whole model, trains; the base stays as the files hold it. Once a weight file changes,
    resuming from the adapter's checkpoint fails naming the file."""
    from safetensors.torch import load_file as read
    from safetensors.torch import save_file

    from catwalk_steps.checkpoints.layout import checkpoint_dir
    from catwalk_steps.launch.launcher import run_training

    from .training import BaseUnchanged, engine, job, weights

    base = tmp_path / "base"
    classifier().save_pretrained(base)
    spec = {
        "type": "catwalk::rank_classifier",
        "pretrained": str(base),
        "adapter": {"type": "lora", "r": 4, "target_modules": PROJECTIONS},
    }
    from tango.common import Lazy

    runs = {}
    for name, engine_type in (("fsdp2", "catwalk::torch_fsdp"), ("ddp", "catwalk::torch")):
        runs[name] = job(
            tmp_path / name,
            engine_block=engine(engine_type, optimizer={"type": "torch::AdamW", "lr": 1e-2}),
            model=spec,
            callbacks=[Lazy(BaseUnchanged)],
            keep_checkpoints=True,
        )
        run_training(runs[name])
        assert (runs[name].work_dir / "base_unchanged.json").is_file()
    sharded, whole = weights(runs["fsdp2"].work_dir), weights(runs["ddp"].work_dir)
    assert sharded.keys() == whole.keys()
    for name, value in whole.items():
        assert torch.allclose(sharded[name], value, atol=1e-5), name
    weights_file = base / "model.safetensors"
    changed = read(weights_file)
    changed["transformer.wte.weight"][0, 0] += 1.0
    save_file(changed, str(weights_file), metadata={"format": "pt"})
    again = job(
        tmp_path / "again",
        engine_block=engine("catwalk::torch_fsdp"),
        model=spec,
        resume_from=checkpoint_dir(runs["fsdp2"].work_dir, 4),
    )
    with pytest.raises(Exception, match=r"model.safetensors changed since \(SHA-256 differs\)"):
        run_training(again)


def test_an_adapter_model_s_weights_are_found_in_its_base_s_files(tmp_path):
    """What FSDP2's ranks read from a local base: each base layer's weight under its name
    without the adapter, the adapter's weights drawn (none is missing, so the rank-wise path
    is taken, not rank 0 building the whole model)."""
    from catwalk_steps.engines.sharded_weights import file_names
    from catwalk_steps.model_files import saved_tensors

    classifier().save_pretrained(tmp_path)
    adapter = {"type": "lora", "r": 4, "target_modules": PROJECTIONS}
    skeleton = RankClassifier(pretrained=str(tmp_path), adapter=adapter, skeleton=True)
    names = file_names(skeleton, saved_tensors(tmp_path))
    assert names is not None
    assert (
        names["lm.transformer.h.0.attn.c_attn.base_layer.weight"]
        == "transformer.h.0.attn.c_attn.weight"
    )
    drawn = {name for name, source in names.items() if source is None}
    assert drawn == {name for name in skeleton.state_dict() if is_adapter_weight(name)}
