"""Choosing modules to wrap (the model's blocks, regexes, or none) and wrapping them, shared by
every engine."""

from __future__ import annotations

import pytest
import torch
from tango.common.exceptions import ConfigurationError
from tango.integrations.torch import Model

from catwalk_steps.engines.wrapping import (
    checkpoint_activations,
    match_modules,
    select_modules,
    wrap_modules,
)
from catwalk_steps.scoring.rank_classifier import RankClassifier

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


def test_left_out_selects_the_declared_blocks_and_an_empty_list_none(model):
    assert model.lm._no_split_modules == {"GPT2Block"}
    assert select_modules(model, None) == ["lm.transformer.h.0", "lm.transformer.h.1"]
    assert select_modules(model, []) == []
    assert select_modules(model, [r"transformer\.h\.1"]) == ["lm.transformer.h.1"]


def test_nested_block_classes_come_children_first():
    class Inner(torch.nn.Linear):
        pass

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner(2, 2)

    model = torch.nn.Sequential(Block(), Block())
    model._no_split_modules = ["Block", "Inner"]
    assert select_modules(model, None) == ["0.inner", "1.inner", "0", "1"]


def test_a_model_without_block_classes_asks_for_modules_to_wrap():
    no_blocks = RankClassifier(
        config={**TINY_GPT2, "model_type": "openai-gpt"}, tokenizer="catwalk::byte_level"
    )
    with pytest.raises(ConfigurationError) as error:
        select_modules(no_blocks, None, "training_engine.modules_to_wrap")
    assert str(error.value) == (
        "training_engine.modules_to_wrap: left out, so the model's blocks would be wrapped, but "
        "OpenAIGPTLMHeadModel declares no block classes (_no_split_modules); give "
        'modules_to_wrap (for this model: ["transformer\\\\.h\\\\.[0-9]+"]), or [] for the '
        "root alone"
    )
    assert select_modules(no_blocks, []) == []  # the root alone, as asked


def test_block_classes_the_model_does_not_have_are_named():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    model._no_split_modules = ["DecoderLayer"]
    with pytest.raises(ConfigurationError, match=r"Sequential has no module of its block classes "):
        select_modules(model, None)


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
