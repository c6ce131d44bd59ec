"""Weight names must fit the model exactly; shards are read in rank order."""

from __future__ import annotations

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
