"""Model and tokenizer specs: what a bad one says."""

from __future__ import annotations

import pytest
from tango.common.exceptions import ConfigurationError

from catwalk_steps.kinds.collate import Collator
from catwalk_steps.scoring.rank_classifier import RankClassifier

from .conftest import TINY_GPT2

BYTE = "catwalk::byte_level"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({}, "model: give exactly one of 'pretrained' or 'config'"),
        ({"config": {"n_layer": 2}, "tokenizer": BYTE}, "model.config: missing field 'model_type'"),
        ({"config": {"model_type": "nope"}, "tokenizer": BYTE}, "model.config: "),
        ({"config": TINY_GPT2}, "model.tokenizer: required when the model is built from 'config'"),
        ({"config": TINY_GPT2, "tokenizer": BYTE, "objective": "mse"}, "model.objective: expected"),
        (
            {"config": TINY_GPT2, "tokenizer": "/no/such/tokenizer"},
            "model.tokenizer '/no/such/tokenizer': no such file or directory",
        ),
        (
            {"pretrained": "/no/such/model"},
            "model.pretrained '/no/such/model': no such file or directory",
        ),
    ],
)
def test_bad_model_specs_name_the_field(spec, message):
    with pytest.raises(ConfigurationError) as error:
        RankClassifier(**spec)
    assert str(error.value).startswith(message)
    assert "\n" not in str(error.value)


def test_bad_collate_tokenizer_names_the_field():
    with pytest.raises(
        ConfigurationError, match="collate_fn.tokenizer '/no/such': no such file or directory"
    ):
        Collator("/no/such")


def test_config_models_take_vocabulary_and_special_tokens_from_the_tokenizer():
    model = RankClassifier(config=TINY_GPT2, tokenizer=BYTE)
    assert model.lm.config.vocab_size == len(model.tokenizer) == 257
    assert model.lm.config.eos_token_id == model.tokenizer.eos_token_id == 256


def test_the_same_spec_has_the_same_cache_identity_whatever_the_weights():
    from tango.common.det_hash import det_hash

    a = RankClassifier(config=TINY_GPT2, tokenizer=BYTE)
    b = RankClassifier(config=TINY_GPT2, tokenizer=BYTE)
    b.lm.transformer.wte.weight.data.add_(1.0)
    assert det_hash(a) == det_hash(b)
    assert det_hash(a) != det_hash(RankClassifier(config=TINY_GPT2, tokenizer=BYTE, init_seed=1))
