"""IA3 adapters (peft), the second adapter type behind the interface (catwalk_steps/adapters/):
its block checked at graph build (through `tango run` too); it starts as its base and merges
exactly; DDP, FairScale FSDP and FSDP2 train it alike, step by step, with the base bitwise
unchanged (tests/fixtures/ia3.jsonnet); its checkpoints hold the adapter alone and a run resumes
from one bit for bit; its peft directory loads with `PeftModel.from_pretrained` on the base and
scores what the run reported and what the merged model scores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tango.common.exceptions import ConfigurationError

from catwalk_steps.adapters.registry import adapter_of, is_adapter_weight, parse_adapter, type_of
from catwalk_steps.checkpoints.discovery import best_checkpoint
from catwalk_steps.checkpoints.manifest import read_manifest
from catwalk_steps.checkpoints.weights import full_model_state
from catwalk_steps.engines.wrapping import check_uniform_units
from catwalk_steps.scoring.rank_classifier import RankClassifier

from .adapter_results import assert_scores_what_the_run_reported, scored_in_a_fresh_process
from .conftest import REPO, TINY_GPT2, history, run_tango, step_result

FIXTURE = REPO / "tests" / "fixtures" / "ia3.jsonnet"
RUNS = ("ddp", "fairscale", "fsdp2")
EVERY = {"target_modules": [r".*\.(c_attn|c_proj|c_fc)"], "feedforward_modules": [r".*\.c_fc"]}


def classifier(adapter: dict | None = None, **kwargs) -> RankClassifier:
    return RankClassifier(
        config=TINY_GPT2, tokenizer="catwalk::byte_level", adapter=adapter, **kwargs
    )


def trained_names(model: torch.nn.Module) -> set[str]:
    return {name for name, p in model.named_parameters() if p.requires_grad}


# --- The block, checked --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"type": "loha"}, "model.adapter.type: one of ['ia3', 'lora'], got 'loha'"),
        ({"type": "ia3", "r": 8}, "model.adapter.r: IA3 has no such key; (it takes "),
        ({"type": "ia3", "target_module": []}, "model.adapter.target_module: IA3 has no such "),
        ({"type": "ia3", "target_modules": []}, "model.adapter.target_modules: a non-empty"),
        ({"type": "ia3", "feedforward_modules": "x"}, "model.adapter.feedforward_modules: a "),
        ({"type": "ia3", "feedforward_modules": ["("]}, "model.adapter.feedforward_modules: inv"),
        ({"type": "lora", "feedforward_modules": []}, "model.adapter.feedforward_modules: LoRA "),
    ],
)
def test_a_bad_ia3_block_is_one_line_naming_its_key(block, message):
    with pytest.raises(ConfigurationError) as raised:
        parse_adapter(block)
    assert str(raised.value).startswith(message), str(raised.value)
    assert "\n" not in str(raised.value)


def test_feedforward_layers_are_targets_and_targets_are_linear():
    with pytest.raises(ConfigurationError, match=r"feedforward_modules: pattern '.\*\\\\.c_fc' "):
        classifier(
            {"type": "ia3", "target_modules": [r".*\.c_attn"], "feedforward_modules": [r".*\.c_fc"]}
        )
    with pytest.raises(ConfigurationError, match=r"\(GPT2MLP\), not a linear layer; IA3 adapts"):
        classifier({"type": "ia3", "target_modules": [r".*\.mlp"]})


def test_ia3_starts_as_its_base_trains_its_vectors_alone_and_merges_exactly():
    """peft's defaults for GPT-2 (c_attn, mlp.c_proj on its inputs); the merged model (each
    vector multiplied into its weight) is the adapted model."""
    base, adapted = classifier().eval(), classifier({"type": "ia3"}).eval()
    assert {n.rsplit(".", 4)[1] for n in trained_names(adapted)} == {"attn", "mlp"}
    assert all(is_adapter_weight(n) for n in trained_names(adapted))
    ids = torch.randint(0, 250, (2, 12))
    with torch.no_grad():
        assert torch.equal(base.lm(ids).logits, adapted.lm(ids).logits)  # vectors of ones
    adapted = classifier({"type": "ia3", **EVERY}).eval()
    with torch.no_grad():
        for name, parameter in adapted.named_parameters():
            if parameter.requires_grad:
                parameter.uniform_(0.5, 1.5)
            elif name.endswith(".bias"):  # GPT-2 starts them at zero: scaled, they would show
                parameter.normal_(std=0.5)
        base.lm.load_state_dict(type_of(adapted.adapter).merged_state(adapted.lm))
        difference = (base.lm(ids).logits - adapted.lm(ids).logits).abs().max()
    assert difference < 1e-5
    assert adapter_of(adapted) is type_of(adapted.adapter) and adapter_of(classifier()) is None


def test_fairscale_units_put_each_vector_in_a_unit_of_its_own():
    """An IA3 layer uses its vector directly: the layer is a unit whose own parameter is the
    vector, its base layer a frozen unit inside it; each unit is all trained or all frozen."""
    from catwalk_steps.engines.adapter_state import adapter_units

    adapted = classifier({"type": "ia3"})
    units = adapter_units(adapted)
    assert units[:2] == [
        "lm.transformer.h.0.attn.c_attn.base_layer",
        "lm.transformer.h.0.attn.c_attn",
    ]
    check_uniform_units(adapted, [*units, "lm.transformer.h.1", "lm.transformer.h.0"], "x")


# --- Trained under every engine (tests/fixtures/ia3.jsonnet) -------------------------------


@pytest.fixture(scope="module")
def ia3_run(tmp_path_factory, request) -> Path:
    from .conftest import once_per_session

    return once_per_session(
        tmp_path_factory, request, "ia3", lambda w: run_tango(FIXTURE, w, "ia3", timeout=900)
    )


@pytest.fixture(scope="module")
def fresh_scores(ia3_run) -> dict:
    """The FairScale and FSDP2 results scored as a user outside the package scores them, in one
    fresh process: merged (transformers) and as the base with the peft adapter."""
    return scored_in_a_fresh_process(ia3_run, "ia3", ["fairscale", "fsdp2"])


def work_dir(workspace: Path, run: str) -> Path:
    return step_result(workspace, "ia3", run) / "work"


@pytest.mark.slow
@pytest.mark.distributed
def test_every_engine_trains_ia3_alike_with_the_base_unchanged(ia3_run):
    losses = {run: [e["loss"] for e in history(ia3_run, "ia3", run)["train"]] for run in RUNS}
    assert len(losses["ddp"]) == 12 and losses["ddp"][-1] < losses["ddp"][0]
    for run in RUNS[1:]:
        assert losses[run] == pytest.approx(losses["ddp"], rel=1e-4), run
    for run in RUNS:
        checked = json.loads((work_dir(ia3_run, run) / "base_unchanged.json").read_text())
        assert checked["compared"] > 10, run  # every base weight, gathered whole, as built
        saved = full_model_state(best_checkpoint(work_dir(ia3_run, run)))
        assert saved and all(".ia3_l." in name for name in saved), (run, sorted(saved)[:3])
        assert any(not torch.equal(v, torch.ones_like(v)) for v in saved.values()), run
        assert (
            "adapter" not in read_manifest(best_checkpoint(work_dir(ia3_run, run)))["base"]["spec"]
        )
    report = (step_result(ia3_run, "ia3", "report") / "report.md").read_text()
    trained = json.loads((step_result(ia3_run, "ia3", "ddp") / "catwalk_model.json").read_text())
    counts = trained["run_card"]["trained"]
    assert counts["adapter"]["type"] == "ia3"
    assert counts["trainable_parameters"] == 2 * (3 * 64 + 64 + 4 * 64 + 4 * 64)  # per block
    assert f"IA3: {counts['trainable_parameters']:,} of {counts['parameters']:,}" in report


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("run", ["fairscale", "fsdp2"])
def test_the_peft_directory_loads_in_peft_and_scores_what_the_run_reported(
    ia3_run, fresh_scores, run
):
    result = step_result(ia3_run, "ia3", run)
    info = json.loads((result / "catwalk_model.json").read_text())
    scored = fresh_scores[run]
    # In the loop, adapter on: the result is the best checkpoint's model.
    reported = max(v["acc"] for v in info["metrics_history"]["validation"])
    evaluated = json.loads((step_result(ia3_run, "ia3", f"eval_{run}") / "data.json").read_text())
    assert_scores_what_the_run_reported(scored, reported, evaluated["acc"])
    config = json.loads((result / "adapter" / "adapter_config.json").read_text())
    assert config["peft_type"] == "IA3" and len(config["target_modules"]) == 8


# --- Resume ---------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("engine_type", ["catwalk::fairscale", "catwalk::torch_fsdp"])
def test_an_ia3_run_resumes_from_its_checkpoint_bit_for_bit(tmp_path, engine_type):
    """Resumed from the checkpoint of step 4, a run ends with the adapter weights of the run
    that went on, byte for byte (FairScale consolidates the vectors' optimizer state)."""
    from catwalk_steps.checkpoints.layout import checkpoint_dir
    from catwalk_steps.launch.launcher import run_training

    from .training import engine, job, model_spec, weights

    def ia3_job(name: str, **kwargs):
        spec = {**model_spec(), "adapter": {"type": "ia3", **EVERY}}
        optimizer = {"type": "torch::AdamW", "lr": 3e-2}
        return job(
            tmp_path / name,
            engine_block=engine(engine_type, optimizer=optimizer),
            model=spec,
            **kwargs,
        )

    whole = ia3_job("whole", keep_checkpoints=True)
    run_training(whole)
    resumed = ia3_job("resumed", resume_from=checkpoint_dir(whole.work_dir, 4))
    run_training(resumed)
    final, expected = weights(resumed.work_dir), weights(whole.work_dir)
    assert final.keys() == expected.keys() and all(".ia3_l." in n for n in final)
    for name, value in expected.items():
        assert torch.equal(final[name], value), name
    assert any(not torch.equal(v, torch.ones_like(v)) for v in expected.values())


# --- Bad blocks through `tango run` ---------------------------------------------------------

ADAPTER = "steps.trained.model.adapter"
BAD_BLOCKS = {
    "unknown_type": (
        {"type": "loha"},
        "ConfigurationError: model.adapter.type: one of ['ia3', 'lora'], got 'loha'",
    ),
    "lora_key_on_ia3": (
        {"type": "ia3", "alpha": 16},
        "ConfigurationError: model.adapter.alpha: IA3 has no such key; (it takes "
        "feedforward_modules, target_modules)",
    ),
    "feedforward_not_a_target": (
        {"type": "ia3", "target_modules": [r".*\.c_attn"], "feedforward_modules": [r".*\.c_fc"]},
        "ConfigurationError: model.adapter.feedforward_modules: pattern '.*\\\\.c_fc' matches "
        "transformer.h.0.mlp.c_fc, which is not among the target_modules",
    ),
}


@pytest.mark.slow
def test_a_bad_adapter_block_is_one_line_through_tango_run_before_any_step(tmp_path):
    from . import commands
    from .commands import error_lines
    from .conftest import EXPERIMENTS, TANGO_ENV, TINY_DEMO, tango_command

    started = {}
    for name, (block, _) in BAD_BLOCKS.items():
        overrides = {**TINY_DEMO, ADAPTER: block}
        argv = tango_command(EXPERIMENTS / "demo.jsonnet", tmp_path / name, name, overrides)
        out = tmp_path / f"{name}.txt"
        started[name] = (commands.start(argv, out, env={**TANGO_ENV, "COLUMNS": "400"}), out)
    for name, (command, out) in started.items():
        code, text = command.wait(300), out.read_text()
        lines = error_lines(text)
        assert code == 1 and len(lines) == 1, (name, code, lines or text[-3000:])
        assert BAD_BLOCKS[name][1] in lines[0], (name, lines[0])
        assert 'Starting step "' not in text, name
