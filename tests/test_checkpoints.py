"""Weight names must fit the model exactly; sharded checkpoints consolidate into the model."""

from __future__ import annotations

from pathlib import Path

import pytest

from catwalk_steps.checkpoints.weights import check_full_weights, tied_parameter_names
from catwalk_steps.scoring.rank_classifier import RankClassifier

from .conftest import TINY_GPT2


@pytest.fixture(scope="module")
def model():
    return RankClassifier(config=TINY_GPT2, tokenizer="catwalk::byte_level")


def test_tied_weights_may_be_absent_and_nothing_else(model):
    names = set(model.state_dict())
    assert tied_parameter_names(model) == {"lm.lm_head.weight"}
    check_full_weights(model, names, "full")
    check_full_weights(model, names - {"lm.lm_head.weight"}, "without the tied head")
    with pytest.raises(
        RuntimeError,
        match=r"weights.pt: weights do not fit the model \(missing: "
        r"\['lm.transformer.ln_f.bias'\], unexpected: \[\]\)",
    ):
        check_full_weights(model, names - {"lm.transformer.ln_f.bias"}, "weights.pt")
    renamed = {name.replace("lm.", "_fsdp_wrapped_module.lm.") for name in names}
    with pytest.raises(RuntimeError, match="unexpected: \\['_fsdp_wrapped_module"):
        check_full_weights(model, renamed, "weights.pt")


def three_shards(rank, world_size, port, directory):
    """FSDP2 with blocks wrapped on 3 ranks writes a sharded (DCP) checkpoint."""
    from tango.common import Lazy, Params
    from tango.integrations.torch import Model, Optimizer

    from catwalk_steps.engines.torch_fsdp_engine import CatwalkTorchFSDPEngine
    from catwalk_steps.engines.train_config import NodeAwareTrainConfig

    from .conftest import TINY_MODEL

    config = NodeAwareTrainConfig(
        "t", Path(directory), worker_id=rank, is_distributed=True, world_size=world_size
    )
    engine = CatwalkTorchFSDPEngine(
        config,
        Lazy(Model, Params(dict(TINY_MODEL))),
        Lazy(Optimizer, Params({"type": "torch::AdamW", "lr": 1e-3})),
        modules_to_wrap=[r"transformer\.h\.[0-9]+"],
    )
    engine.save_state(Path(directory))


@pytest.mark.distributed
def test_three_sharded_ranks_consolidate_into_the_whole_model(tmp_path, model):
    """Shards are found through the checkpoint's metadata, not in file-system order."""
    import torch

    from catwalk_steps.checkpoints.layout import DCP_MODEL_DIR
    from catwalk_steps.checkpoints.weights import full_model_state

    from .distributed import run_distributed

    run_distributed(three_shards, tmp_path, str(tmp_path), world_size=3)
    shards = sorted(p.name for p in (tmp_path / DCP_MODEL_DIR).glob("*.distcp"))
    assert shards == ["__0_0.distcp", "__1_0.distcp", "__2_0.distcp"]
    consolidated = full_model_state(tmp_path)
    expected = model.state_dict()  # the same spec and init seed, built whole in this process
    assert consolidated.keys() == expected.keys()
    for name, value in expected.items():
        assert torch.equal(consolidated[name], value), name


# --- Complete only when the manifest says so ---------------------------------------------------


def fake_checkpoint(work_dir: Path, step: int, files: dict[str, bytes]) -> Path:
    from catwalk_steps.checkpoints.layout import checkpoint_dir
    from catwalk_steps.checkpoints.manifest import mark_complete

    directory = checkpoint_dir(work_dir, step)
    directory.mkdir(parents=True)
    for name, content in files.items():
        (directory / name).write_bytes(content)
    mark_complete(directory, {"step": step})
    return directory


def test_a_checkpoint_without_its_manifest_or_with_a_missing_file_is_not_used(tmp_path):
    from catwalk_steps.checkpoints import complete_checkpoints, problem_with

    files = {"model.pt": b"m" * 10, "optimizer.pt": b"o" * 20, "trainer.pt": b"t"}
    step4 = fake_checkpoint(tmp_path, 4, files)
    step8 = fake_checkpoint(tmp_path, 8, files)
    assert problem_with(step8) is None
    (step8 / "optimizer.pt").unlink()
    assert problem_with(step8) == f"{step8 / 'optimizer.pt'}: missing"
    (step4 / "COMPLETE.json").unlink()
    assert "incomplete (no COMPLETE.json" in problem_with(step4)
    assert complete_checkpoints(tmp_path) == [step8]
    (step8 / "model.pt").write_bytes(b"m" * 4)
    assert (
        problem_with(step8) == f"{step8 / 'model.pt'}: 4 bytes, 10 expected (truncated or changed)"
    )


@pytest.mark.slow
def test_a_damaged_checkpoint_is_skipped_with_a_warning_naming_the_file(tmp_path, caplog):
    """The run resumes from the checkpoint before the damaged one and ends where it had ended."""
    import logging

    import torch

    from catwalk_steps.checkpoints import checkpoint_dir, problem_with
    from catwalk_steps.checkpoints.layout import MODEL_FILE
    from catwalk_steps.launch import run_training

    from .training import job, weights

    damaged = job(tmp_path / "dmg", device_count=1, keep_checkpoints=True)
    run_training(damaged)
    finished = weights(damaged.work_dir)
    latest = checkpoint_dir(damaged.work_dir, 8)
    model_file = latest / MODEL_FILE
    model_file.write_bytes(model_file.read_bytes()[:1000])  # truncated
    assert problem_with(latest).startswith(f"{model_file}: 1000 bytes,")
    with caplog.at_level(logging.WARNING, logger="catwalk_steps.training.checkpointing"):
        run_training(damaged)
    assert f"Skipping checkpoint: {model_file}: 1000 bytes" in caplog.text
    assert "Resumed from" in caplog.text or checkpoint_dir(damaged.work_dir, 4).exists()
    for key, value in finished.items():
        assert torch.equal(weights(damaged.work_dir)[key], value), key
