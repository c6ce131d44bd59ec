"""GRPO's step, its pieces in-process (issue 59): the model's `grpo` batch (a prompt once, its G
completions after it) gives the loss and gradients of `grpo_loss` over each completion scored
alone by a plain forward; a rank without prompts runs a forward that weighs nothing; the
completions' table (rewards, lengths, truncation) into advantages and TRL's batch metrics.
(Through `tango run`: tests/test_grpo_training.py.)"""

from __future__ import annotations

import pytest
import torch
from tango.common import Lazy, Params
from tango.integrations.torch import Model

from catwalk_steps.adapters.registry import type_of
from catwalk_steps.distributed.exchange import all_gathered_rows
from catwalk_steps.objectives.grpo import GrpoSettings
from catwalk_steps.objectives.grpo_loss import grpo_loss
from catwalk_steps.scoring.grpo_objective import grpo_batch, grpo_outputs
from catwalk_steps.scoring.rank_classifier import RankClassifier
from catwalk_steps.training.reference import FrozenReference
from catwalk_steps.training.sampled import SampledTraining

from .conftest import TINY_MODEL

PROMPTS = [[5, 6, 7], [8, 9]]
COMPLETIONS = [[1, 2, 3], [4], [2, 2], [3, 1, 1], [7, 7], [1], [9, 8, 7], [6, 5]]  # G = 4
ADVANTAGES = torch.tensor([1.0, -0.5, 0.25, -0.75, 0.5, -1.0, 1.5, -1.0])


def model(**grpo) -> RankClassifier:
    keys = {k: v for k, v in TINY_MODEL.items() if k != "type"}
    return RankClassifier(**keys, objective="grpo", grpo=grpo)


def alone(lm, temperature: float) -> torch.Tensor:
    """[completions, longest]: each completion's token log-probabilities, each scored in a
    forward of its own (prompt, then completion), 0 at padding."""
    out = []
    for index, completion in enumerate(COMPLETIONS):
        prompt = PROMPTS[index // 4]
        ids = torch.tensor([prompt + completion])
        logits = lm(input_ids=ids).logits[0, len(prompt) - 1 : -1].float() / temperature
        logps = logits.log_softmax(-1).gather(-1, torch.tensor(completion)[:, None])[:, 0]
        out.append(torch.nn.functional.pad(logps, (0, 3 - len(completion))))
    return torch.stack(out)


@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "dr_grpo"])
def test_the_packed_batch_gives_grpo_loss_of_each_completion_scored_alone(loss_type):
    torch.manual_seed(0)
    settings = {"temperature": 0.7, "loss_type": loss_type, "max_completion_length": 3}
    classifier = model(**settings)
    in_loss = [True] * 7 + [False]  # the last one truncated, masked
    batch = grpo_batch(PROMPTS, COMPLETIONS, in_loss, ADVANTAGES, dapo_tokens=7.5, pad_id=0)
    outputs = grpo_outputs(classifier.lm, batch, classifier.grpo)
    outputs["loss"].backward()
    ours = [p.grad.clone() for p in classifier.lm.parameters()]
    classifier.lm.zero_grad()
    logps = alone(classifier.lm, 0.7)
    mask = batch["completion_mask"]
    assert mask.sum() == sum(len(c) for c in COMPLETIONS[:7])
    want, metrics = grpo_loss(logps, None, None, ADVANTAGES, mask, 0.0, 0.2, 0.2, loss_type, 3, 7.5)
    want.backward()
    assert outputs["loss"].item() == pytest.approx(want.item(), rel=1e-5, abs=1e-7)
    assert outputs["grpo_tokens"] == mask.sum()
    assert set(metrics) <= set(outputs["grpo_metrics"])
    for got, expected in zip(ours, (p.grad for p in classifier.lm.parameters()), strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-7)


def test_a_rank_without_prompts_runs_a_forward_that_weighs_nothing():
    classifier = model()
    batch = grpo_batch([], [], [], torch.zeros(0), dapo_tokens=10.0, pad_id=0)
    outputs = grpo_outputs(classifier.lm, batch, classifier.grpo)
    assert outputs["loss"].item() == 0.0 and outputs["grpo_tokens"] == 0
    outputs["loss"].backward()  # a graph through the model: the engines' backward joins


class Alone(SampledTraining):
    """The step's arithmetic without an engine."""

    def __init__(self, **grpo):
        self.settings, self.world_size = GrpoSettings.of(grpo), 1


def test_the_table_gives_each_group_s_advantages_and_trl_s_batch_metrics():
    step = Alone(num_generations=2, mask_truncated_completions=True, max_completion_length=3)
    rewards = torch.tensor([[1.0], [0.0], [1.0], [1.0]])
    table = torch.cat([rewards, torch.tensor([[3.0, 1], [2, 0], [1, 0], [3, 1]])], dim=1)
    everyone, offset = all_gathered_rows(table, 1)
    assert offset == 0 and torch.equal(everyone, table)
    advantages = step.advantages(everyone)
    assert advantages[0] > 0 > advantages[1] and advantages[2:].abs().max() == 0
    assert step.in_loss(table).tolist() == [False, True, True, False]
    metrics = step.batch_metrics(everyone)
    assert metrics["reward"] == 0.75 and metrics["rewards/task_metric/mean"] == 0.75
    assert metrics["completions/mean_length"] == 2.25
    assert metrics["completions/clipped_ratio"] == 0.5
    assert metrics["frac_reward_zero_std"] == 0.5
    assert not Alone(num_generations=2).in_loss(table).logical_not().any()


class OneProcess:
    """An engine's evaluation forward over one process's model (no wrapper)."""

    def __init__(self, classifier: RankClassifier):
        self.model = classifier

    def forward_eval(self, batch: dict) -> dict:
        with torch.no_grad():
            return self.model(**batch)


class Held(SampledTraining):
    """The step's generation batch without rollouts (its micro-batches given)."""

    def __init__(self, classifier: RankClassifier):
        self.engine, self.settings = OneProcess(classifier), classifier.grpo
        self.held, self.logged = [], {}


def test_with_mu_2_the_generation_batch_holds_the_sampling_policy_s_log_probabilities():
    """μ = 2: the old log-probabilities are the policy's when it sampled (before the update,
    eval mode), held for the batch's second step, and a checkpoint carries them; once the
    policy moved, the loss's ratio is no longer 1."""
    torch.manual_seed(0)
    classifier = model(temperature=0.7, num_iterations=2, epsilon=0.0)
    step = Held(classifier)
    batches = [{"grpo": grpo_batch(PROMPTS, COMPLETIONS, [True] * 8, ADVANTAGES, 7.5, 0)}]
    step.with_old_logps(batches)
    assert classifier.training  # back in train mode
    with torch.no_grad():
        want = alone(classifier.lm, 0.7)
    old = torch.tensor(batches[0]["grpo"]["old_logps"])
    torch.testing.assert_close(old, want, rtol=1e-5, atol=1e-6)
    step.held = batches
    assert [step.repeats(s) for s in (0, 1, 2)] == [2, 1, 2]
    assert step.batches([], 1) is batches  # its second step: the same batch, no rollout
    restored = Held(classifier)
    restored.load_state_dict(step.state_dict())
    assert restored.batches([], 3) == batches
    with torch.no_grad():
        for parameter in classifier.lm.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    outputs = grpo_outputs(classifier.lm, batches[0]["grpo"], classifier.grpo)
    moved = alone(classifier.lm, 0.7).detach()
    want_loss, _ = grpo_loss(moved, old, None, ADVANTAGES, batches[0]["grpo"]["completion_mask"],
                             0.0, 0.0, 0.0, "dapo", 512, 7.5)  # fmt: skip
    assert outputs["loss"].item() == pytest.approx(want_loss.item(), rel=1e-4)
    assert outputs["grpo_metrics"]["clip_ratio/region_mean"] > 0  # the ratio moved off 1


def test_beta_with_lora_is_grpo_loss_s_kl_to_the_base_with_the_adapter_off():
    """beta > 0 with a LoRA adapter: the loss and TRL's `kl` are `grpo_loss`'s with the
    reference log-probabilities of each completion scored alone with the adapter off."""
    torch.manual_seed(0)
    keys = {k: v for k, v in TINY_MODEL.items() if k != "type"}
    settings = {"beta": 0.04, "temperature": 0.7, "max_completion_length": 3}
    adapter = {"type": "lora", "r": 4, "alpha": 8}
    classifier = RankClassifier(**keys, objective="grpo", grpo=settings, adapter=adapter)
    with torch.no_grad():  # the adapter moved off its start (where it adds nothing)
        for parameter in classifier.lm.parameters():
            if parameter.requires_grad:
                parameter.add_(0.1 * torch.randn_like(parameter))
    batch = grpo_batch(PROMPTS, COMPLETIONS, [True] * 8, ADVANTAGES, dapo_tokens=7.5, pad_id=0)
    outputs = grpo_outputs(classifier.lm, batch, classifier.grpo, classifier.adapter)
    logps = alone(classifier.lm, 0.7)
    with torch.no_grad(), type_of(classifier.adapter).switched_off(classifier.lm):
        reference = alone(classifier.lm, 0.7)
    mask = batch["completion_mask"]
    want, metrics = grpo_loss(
        logps, None, reference, ADVANTAGES, mask, 0.04, 0.2, 0.2, "dapo", 3, 7.5
    )
    assert metrics["kl"] > 0
    assert outputs["grpo_metrics"]["kl"].item() == pytest.approx(metrics["kl"].item(), rel=1e-4)
    assert outputs["loss"].item() == pytest.approx(want.item(), rel=1e-4, abs=1e-7)


class Frozen(OneProcess):
    """An engine that places a frozen model as it is (DDP's way) and runs its forwards."""

    def frozen_model(self, lazy) -> RankClassifier:
        return lazy.construct().eval().requires_grad_(False)

    def forward_eval(self, batch: dict, model=None) -> dict:
        with torch.no_grad():
            return (model or self.model)(**batch)


class Sampled(Held):
    """The step with its generation batch given (no rollouts) and a frozen reference."""

    def __init__(self, classifier: RankClassifier, reference, batches: list):
        super().__init__(classifier)
        self.engine = Frozen(classifier)
        self.reference = FrozenReference(self.engine, reference)
        self.given = batches

    def generation_batch(self, micro_batches, step: int) -> list:
        return [{"grpo": dict(batch["grpo"])} for batch in self.given]


def test_a_full_model_s_reference_is_scored_once_per_generation_batch_into_the_kl():
    """beta > 0 without an adapter, μ = 2: the frozen reference's log-probabilities of each
    completion scored alone, computed once per generation batch (one forward per micro-batch
    at its first step, none at its second), carried as `ref_logps`; the loss and TRL's `kl`
    are `grpo_loss`'s with them."""
    torch.manual_seed(0)
    settings = {"beta": 0.04, "temperature": 0.7, "num_iterations": 2, "max_completion_length": 3}
    classifier = model(**settings)
    # Its block as the job gives it (training.reference.reference_block): the policy's objective
    # and settings (its temperature), its own weights.
    block = {**TINY_MODEL, "init_seed": 9, "objective": "grpo", "grpo": settings}
    reference = Lazy(Model, Params(block))
    batch = {"grpo": grpo_batch(PROMPTS, COMPLETIONS, [True] * 8, ADVANTAGES, 7.5, 0)}
    step = Sampled(classifier, reference, [batch, batch])
    first = step.batches([], 0)
    assert step.reference.forwards == 2 and step.batches([], 1) is first
    assert step.reference.forwards == 2  # its second step: nothing scored again
    with torch.no_grad():
        want = alone(step.reference.model.lm, 0.7)
        assert (want - alone(classifier.lm, 0.7)).abs().max() > 0  # another model
    ref = torch.tensor(first[0]["grpo"]["ref_logps"])
    torch.testing.assert_close(ref, want, rtol=1e-5, atol=1e-6)
    outputs = grpo_outputs(classifier.lm, first[0]["grpo"], classifier.grpo)
    logps = alone(classifier.lm, 0.7)
    old = torch.tensor(first[0]["grpo"]["old_logps"])
    mask = batch["grpo"]["completion_mask"]
    loss, metrics = grpo_loss(logps, old, want, ADVANTAGES, mask, 0.04, 0.2, 0.2, "dapo", 3, 7.5)
    assert metrics["kl"] > 0
    assert outputs["grpo_metrics"]["kl"].item() == pytest.approx(metrics["kl"].item(), rel=1e-4)
    assert outputs["loss"].item() == pytest.approx(loss.item(), rel=1e-4, abs=1e-7)
