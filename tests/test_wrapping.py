"""Regex-driven module matching and wrapping, shared by every engine."""

from __future__ import annotations

import pytest
import torch
from tango.common.exceptions import ConfigurationError
from tango.integrations.torch import Model

from catwalk_steps.scoring.rank_classifier import RankClassifier
from catwalk_steps.training.wrapping import checkpoint_activations, match_modules, wrap_modules

from .conftest import TINY_GPT2

BLOCKS = r"transformer\.h\.[0-9]+"


class Marker(torch.nn.Module):
    """Stands in for an FSDP wrapper: records what it wraps."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, *args, **kwargs):
        return self.inner(*args, **kwargs)


@pytest.fixture
def model() -> RankClassifier:
    return RankClassifier(config=TINY_GPT2, tokenizer="catwalk::byte_level")


def test_patterns_fullmatch_names_with_or_without_the_lm_prefix(model):
    assert match_modules(model, [BLOCKS]) == ["lm.transformer.h.0", "lm.transformer.h.1"]
    assert match_modules(model, [r"lm\." + BLOCKS]) == ["lm.transformer.h.0", "lm.transformer.h.1"]
    assert match_modules(model, [r"transformer\.h\.1"]) == ["lm.transformer.h.1"]


def test_nested_matches_come_children_first_and_wrap_inside_out(model):
    names = match_modules(model, [BLOCKS, BLOCKS + r"\.mlp"])
    assert names == [
        "lm.transformer.h.0.mlp",
        "lm.transformer.h.1.mlp",
        "lm.transformer.h.0",
        "lm.transformer.h.1",
    ]
    wrap_modules(model, names, Marker)
    wrapped = {name for name, module in model.named_modules() if isinstance(module, Marker)}
    assert wrapped == {
        "lm.transformer.h.0.inner.mlp",
        "lm.transformer.h.1.inner.mlp",
        "lm.transformer.h.0",
        "lm.transformer.h.1",
    }
    assert isinstance(model.lm.transformer.h[0].inner.mlp, Marker)


def test_a_pattern_matching_nothing_lists_the_closest_names(model):
    with pytest.raises(ConfigurationError) as error:
        match_modules(model, [BLOCKS, r"transformer\.blocks\.[0-9]+"])
    message = str(error.value)
    assert message.startswith(
        r"modules_to_wrap: pattern 'transformer\\.blocks\\.[0-9]+' matches no module; "
        "closest module names: "
    )
    assert "lm.transformer.h.0" in message


def test_an_invalid_regex_names_the_pattern(model):
    with pytest.raises(ConfigurationError) as error:
        match_modules(model, [r"h\.[0-9"])
    assert str(error.value) == (
        r"modules_to_wrap: invalid regex 'h\\.[0-9' (unterminated character set at position 3)"
    )


def test_activation_checkpointing_keeps_parameter_names_and_results(model):
    batch = torch.randint(0, 256, (2, 12))
    expected = model.lm(batch).logits
    names_before = list(model.state_dict())
    for name in match_modules(model, [BLOCKS]):
        checkpoint_activations(model.get_submodule(name))
    assert list(model.state_dict()) == names_before
    logits = model.lm(batch).logits
    torch.testing.assert_close(logits, expected)
    logits.sum().backward()
    assert model.lm.transformer.h[0].mlp.c_fc.weight.grad is not None


@pytest.mark.parametrize(
    "name", ["catwalk::with_wrapped_modules", "fairscale::with_wrapped_modules"]
)
def test_model_constructors_use_the_same_matching(name):
    model = Model.from_params(
        {
            "type": name,
            "model": {
                "type": "catwalk::rank_classifier",
                "config": TINY_GPT2,
                "tokenizer": "catwalk::byte_level",
            },
            "modules_to_wrap": [BLOCKS],
            "activation_checkpointing": True,
        }
    )
    assert model.lm.transformer.h[1]._catwalk_checkpointed
    with pytest.raises(ConfigurationError, match="closest module names"):
        Model.from_params(
            {
                "type": name,
                "model": {
                    "type": "catwalk::rank_classifier",
                    "config": TINY_GPT2,
                    "tokenizer": "catwalk::byte_level",
                },
                "modules_to_wrap": ["blocks"],
            }
        )
