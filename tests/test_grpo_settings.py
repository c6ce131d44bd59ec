"""The `grpo` block (issue 59 item 1): TRL 1.16's names and defaults (read from the fixture TRL's
own GRPOConfig wrote: tests/fixtures/make_grpo_fixture.py), each unknown key or impossible value
one line naming it; the loss's own refusals; where the objective's reference comes from, and the
frozen reference's model block (beta > 0 without an adapter)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tango.common import Lazy, Params
from tango.common.exceptions import ConfigurationError
from tango.integrations.torch import Model

from catwalk_steps.objectives import Reference, objective_named
from catwalk_steps.objectives.grpo import GrpoSettings
from catwalk_steps.objectives.grpo_loss import group_advantages, grpo_loss
from catwalk_steps.settings import TrainSettings
from catwalk_steps.training.reference import reference_block

from .conftest import TINY_MODEL

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "grpo_parity.json").read_text())


def test_the_defaults_are_trls():
    config = GrpoSettings().as_config()
    assert {key: config[key] for key in FIXTURE["trl_defaults"]} == FIXTURE["trl_defaults"]
    # The rewards' keys: TRL's reward_weights (None: 1 each), ours beside it (see test_rewards).
    assert config["reward_weights"] is None
    assert config["reward_funcs"] == [{"type": "catwalk::task_metric"}]
    assert config["reward_timeout"] == 10.0
    assert GrpoSettings.of(None) == GrpoSettings.of({}) == GrpoSettings()
    assert GrpoSettings().clip_high == GrpoSettings().epsilon
    assert GrpoSettings.of({"epsilon_high": 0.28}).clip_high == 0.28


@pytest.mark.parametrize("given, read", [(True, "group"), (False, "none"), ("batch", "batch")])
def test_scale_rewards_takes_trls_booleans(given, read):
    assert GrpoSettings.of({"scale_rewards": given}).scale_rewards == read


BAD = [
    ("num_generation", 4, "no such key (it takes num_generations, temperature, top_p, "),
    ("num_generations", 1, "an integer >= 2 (a group's completions are compared"),
    ("num_generations", 4.0, "an integer >= 2"),
    ("num_generations", True, "an integer >= 2"),
    ("temperature", 0, "a number > 0, got 0"),
    ("temperature", float("nan"), "a number > 0, got nan"),
    ("top_p", 0, "a number in (0, 1], got 0"),
    ("top_p", 1.5, "a number in (0, 1], got 1.5"),
    ("top_k", -1, "an integer >= 0 (0: off), got -1"),
    ("top_k", None, "an integer >= 0 (0: off), got None"),
    ("max_completion_length", 0, "an integer >= 1, got 0"),
    ("max_completion_length", None, "an integer >= 1, got None"),
    ("beta", -0.1, "a number >= 0, got -0.1"),
    ("beta", "0.04", "a number >= 0, got '0.04'"),
    ("epsilon", 1.0, "a number in [0, 1), got 1.0"),
    ("epsilon", -0.2, "a number in [0, 1), got -0.2"),
    ("epsilon_high", -0.28, "a number >= 0 or null, got -0.28"),
    ("num_iterations", 0, "an integer >= 1, got 0"),
    ("scale_rewards", "std", "one of group, batch, none (or true, false), got 'std'"),
    ("loss_type", "cispo", "one of grpo, bnpo, dr_grpo, dapo, got 'cispo' (a TRL loss type this"),
    ("loss_type", "ppo", "one of grpo, bnpo, dr_grpo, dapo, got 'ppo'"),
    ("mask_truncated_completions", "yes", "true or false, got 'yes'"),
    ("rewards", [], "no such key (it takes num_generations, "),
    ("reward_weights", [1.0, 0.5], "2 weights for 1 reward (catwalk::task_metric); give one"),
    ("reward_weights", 1.0, "a list of numbers, one per reward, got 1.0"),
    ("reward_timeout", -1, "a number of seconds > 0, got -1"),
    ("reward_funcs", ["catwalk::nope"], "[0].type: unknown reward type 'catwalk::nope'"),
]


@pytest.mark.parametrize("key, value, message", BAD, ids=[f"{k}={v!r}" for k, v, _ in BAD])
def test_each_bad_key_or_value_is_one_line_naming_it(key, value, message):
    with pytest.raises(ConfigurationError) as caught:
        GrpoSettings.of({key: value}, "model.grpo")
    text = str(caught.value)
    assert "\n" not in text
    assert text.startswith(f"model.grpo.{key}{'' if message[0] == '[' else ': '}{message}"), text


def test_the_rewards_are_read_with_the_block():
    """The block's reward keys, TRL's names, read by the rewards room into one typed object;
    the unknown-key line lists them with the block's own."""
    given = {"num_generations": 4, "reward_funcs": ["catwalk::task_metric"], "reward_weights": [2]}
    settings = GrpoSettings.of(given)
    assert settings.num_generations == 4 and settings.rewards.weights == (2.0,)
    assert settings.rewards.names == ("task_metric",)
    with pytest.raises(ConfigurationError, match=r"reward_funcs, reward_weights, reward_timeout\)"):
        GrpoSettings.of({"reward_func": []})


def test_the_objective_says_where_its_reference_comes_from_and_counts_mu():
    """No reference with beta 0; with beta > 0 the base with the adapter off, or (a full
    model) a frozen model; μ > 1 trains, and counts its optimizer steps as TRL does (μ per
    generation batch)."""
    grpo = objective_named("grpo")
    assert grpo.settings_of(grpo, {"beta": 0.04}).beta == 0.04
    assert grpo.reference(None, None) is None and grpo.reference(None, {"beta": 0}) is None
    assert grpo.reference({"type": "lora"}, {"beta": 0.04}) is Reference.ADAPTER_OFF
    assert grpo.reference(None, {"beta": 0.04}) is Reference.MODEL
    assert grpo.settings_of(grpo, {"beta": 0.0, "num_iterations": 1}) == GrpoSettings()
    assert grpo.settings_of(grpo, {"num_iterations": 2}).num_iterations == 2
    assert grpo.updates_per_batch({"num_iterations": 3}) == 3
    assert grpo.updates_per_batch(None) == 1 and objective_named("lm").updates_per_batch(None) == 1


def test_the_reference_s_block_is_the_policy_s_start_or_train_reference(tmp_path):
    """The frozen reference's model block (each worker builds it): the policy's block as it
    starts (its `init_from` loaded), a `reference` directory loaded into it, or a given block;
    always with the policy's objective and settings (its sampling temperature); none with beta
    0 or an adapter."""
    policy = {**TINY_MODEL, "objective": "grpo", "grpo": {"beta": 0.04, "temperature": 0.7}}

    def block(model: dict, **keys):
        lazy = Lazy(Model, Params(model))
        settings = TrainSettings(lazy, None, None, None, **keys)  # type: ignore[arg-type]
        return reference_block(settings.started())

    assert block(policy) == policy
    started = block(policy, init_from=str(tmp_path))
    assert started["pretrained"] == str(tmp_path) and "config" not in started
    given = block(policy, reference=str(tmp_path))
    assert given["pretrained"] == str(tmp_path) and given["grpo"] == policy["grpo"]
    other = {"config": {"model_type": "gpt2", "n_layer": 1}, "objective": "lm", "init_seed": 3}
    assert block(policy, reference=other) == {
        "type": "catwalk::rank_classifier",
        "config": other["config"],
        "init_seed": 3,
        "objective": "grpo",
        "grpo": policy["grpo"],
    }
    assert block({**policy, "grpo": {"beta": 0.0}}) is None
    assert block({**policy, "adapter": {"type": "lora"}}) is None


def test_the_loss_refuses_what_it_cannot_compute():
    logps, mask = torch.zeros(2, 3), torch.ones(2, 3)
    common = dict(advantages=torch.zeros(2), completion_mask=mask, epsilon_low=0.2,
                  epsilon_high=0.2, max_completion_length=3)  # fmt: skip
    with pytest.raises(ValueError, match="beta is not 0 and no reference"):
        grpo_loss(logps, None, None, beta=0.04, loss_type="dapo", **common)
    with pytest.raises(ValueError, match="loss_type: one of"):
        grpo_loss(logps, None, None, beta=0.0, loss_type="ppo", **common)
    with pytest.raises(ValueError, match="scale_rewards: one of"):
        group_advantages(torch.zeros(4), 2, "std")
