"""Weight names must fit the model exactly; sharded checkpoints consolidate into the model."""

from __future__ import annotations

from pathlib import Path

import pytest

from catwalk_steps.checkpoints import check_full_weights, tied_parameter_names
from catwalk_steps.models import RankClassifier

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

    from catwalk_steps.engines import CatwalkTorchFSDPEngine
    from catwalk_steps.train_config import NodeAwareTrainConfig

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

    from catwalk_steps.checkpoints import DCP_MODEL_DIR, full_model_state

    from .distributed import run_distributed

    run_distributed(three_shards, tmp_path, str(tmp_path), world_size=3)
    shards = sorted(p.name for p in (tmp_path / DCP_MODEL_DIR).glob("*.distcp"))
    assert shards == ["__0_0.distcp", "__1_0.distcp", "__2_0.distcp"]
    consolidated = full_model_state(tmp_path)
    expected = model.state_dict()  # the same spec and init seed, built whole in this process
    assert consolidated.keys() == expected.keys()
    for name, value in expected.items():
        assert torch.equal(consolidated[name], value), name
