"""GRPO's optimizer step in the loop (`objective: 'grpo'`, issue 59): before the forwards, each
micro-batch of prompts (a generative task's generation requests, its padding not live) gets G
sampled completions per prompt, their rewards and advantages, and becomes the model's `grpo`
batch (:func:`~catwalk_steps.scoring.grpo_objective.grpo_batch`); after them, TRL's metrics of
the step, the same on every rank, for the history.

- Rollouts: every decoding step one `forward_eval` through the engine's root wrapper (no
  gradients; the model in eval mode), the ranks in lockstep
  (:func:`~catwalk_steps.scoring.rollouts.rollouts`). The draws come from
  :func:`~catwalk_steps.scoring.sampling.generator_for` of (the run's seed, the rank, the
  step): a run resumed at a step samples what the uninterrupted run sampled there, with no
  random state saved.
- Rewards: each completion's text (decoded, cut at the task's stop sequences as evaluation cuts
  it) scored on the rank that sampled it (:func:`~catwalk_steps.rewards.score_completions`, in
  the worker's main thread: the bound's SIGALRM). A prompt's G completions stay on its rank, so
  its group is whole there; the table of rewards, lengths and truncation is gathered from every
  rank once, for `scale_rewards: 'batch'` (the batch's standard deviation), "dapo"'s token
  count and the metrics.
- Records: at a logged step that samples, each completion's prompt, text, rewards and advantage,
  every rank's, written by rank 0 to `completions/step_<n>.jsonl` in the work directory
  (:mod:`.completion_records`).
- μ (`num_iterations`): `train_steps` counts optimizer steps, as TRL's do; a generation batch
  (the prompts of one step, the loop gives them μ times) is sampled at its first step, its old
  log-probabilities computed then (no gradients, the model in eval mode, as it sampled), and
  trained on μ times. Its draws are seeded by the generation batch's index (step // μ: with
  μ = 1, the step). A checkpoint inside a generation batch holds it (each rank's own: the
  sampling policy's weights are gone once it moved, so nothing can draw or score it again):
  a resumed run trains on it what the uninterrupted run did. μ = 1: the old log-probabilities
  are the current ones (the model's forward detaches them), nothing is held.
- Reference (beta > 0, a full model): a frozen model's log-probabilities of each generation
  batch's completions, computed once at its first step and held with it (:mod:`.reference`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ..distributed.exchange import all_gathered_rows
from ..distributed.groups import distributed_position
from ..engines.scorer import AllRanks, inner_model
from ..objectives.grpo import GrpoSettings
from ..objectives.grpo_loss import group_advantages, reward_metrics, weighted_rewards
from ..rewards import score_completions
from ..scoring.choices import evaluating
from ..scoring.generation import Ranks, eos_ids_of, forward_step
from ..scoring.grpo_objective import grpo_batch
from ..scoring.rollouts import Completion, RolloutSettings, rollouts
from ..scoring.sampling import Sampling, generator_for
from .callbacks import summed_over_ranks
from .completion_records import completion_records, written_by_rank_0
from .reference import FrozenReference

logger = logging.getLogger(__name__)

EXTREMES = {"clip_ratio/low_min": dist.ReduceOp.MIN, "clip_ratio/high_max": dist.ReduceOp.MAX}


def sampled_training(
    engine: Any, schedule: Any, work_dir: Path, reference: Any = None
) -> SampledTraining | None:
    """The loop's GRPO step for a model whose objective samples its completions (its
    `schedule`: the run's seed, and the steps logged, whose completions are recorded in
    `work_dir`; `reference`: the lazy frozen reference, :mod:`.reference`, or None); else
    None."""
    model = inner_model(engine.model)
    if not model.objective.samples:
        return None
    frozen = None if reference is None else FrozenReference(engine, reference)
    return SampledTraining(engine, model, schedule, work_dir, frozen)


def extreme(values: list[torch.Tensor], op: Any, device: Any, world_size: int) -> float:
    """The smallest (MIN) or largest (MAX) of the values not NaN over micro-batches and ranks;
    NaN where none is. Collective."""
    largest = op == dist.ReduceOp.MAX
    none = -float("inf") if largest else float("inf")
    present = [float(v) for v in values if not torch.isnan(v)]
    value = torch.tensor((max if largest else min)(present, default=none), device=device)
    if world_size > 1:
        dist.all_reduce(value, op=op)
    return float("nan") if value.isinf() else float(value)


def rollout_settings(settings: GrpoSettings, lm: Any, encoder: Any) -> RolloutSettings:
    """How the policy `lm` samples a micro-batch's completions (`encoder`: its tokens)."""
    s = settings
    return RolloutSettings(
        s.num_generations,
        Sampling(s.temperature, s.top_p, s.top_k),
        s.max_completion_length,
        eos_ids_of(lm, encoder.tokenizer),
        encoder.pad_id,
    )


class SampledTraining:
    """GRPO's step for one worker (see the module)."""

    def __init__(
        self, engine: Any, model: Any, schedule: Any, work_dir: Path, reference: Any = None
    ):
        self.engine, self.seed, self.logs = engine, schedule.seed, schedule.logs
        self.reference: FrozenReference | None = reference  # beta > 0, a full model
        self.work_dir = work_dir  # its `completions/` records
        self.rank, self.world_size = distributed_position()
        self.settings: GrpoSettings = model.grpo
        self.device = engine.train_config.worker_local_default_device
        self.ranks = AllRanks(self.device) if self.world_size > 1 else Ranks()
        self.lm = model.lm
        self.logged: dict[str, float] = {}
        self.held: list[dict[str, Any]] = []  # μ > 1: the generation batch being trained on

    def repeats(self, step: int) -> int:
        """How many more times the loop gives the prompts of the generation batch that step
        `step` (0-based) is in: μ at its first step, fewer after a resume inside it."""
        return self.settings.num_iterations - step % self.settings.num_iterations

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint holds of this rank's GRPO: with μ > 1, the generation batch and
        its metrics (data: tensors, numbers)."""
        if self.settings.num_iterations == 1:
            return {}
        return {"held": self.held, "logged": self.logged}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.held, self.logged = state.get("held", []), state.get("logged", {})

    def sample(
        self, batch: Any, generator: torch.Generator, forward: Any
    ) -> tuple[list, list[Completion]]:
        """A micro-batch's live prompts (instance, tokens) and their completions, each decoding
        step one `forward` (the engine's, :meth:`~catwalk_steps.engines.base.CatwalkEngine.
        generating`). Collective."""
        live = [
            (instance, prompt)
            for instance, prompt, alive in zip(
                batch.instances, batch.prompts, batch.live, strict=True
            )
            if alive
        ]
        step = forward_step(forward)
        encoder = batch.encoder
        settings = rollout_settings(self.settings, self.lm, encoder)
        stops = lambda i, tokens: encoder.stops(tokens, live[i][0].until)  # noqa: E731
        done = rollouts(step, [p for _, p in live], settings, generator, self.ranks, stops=stops)
        return live, done

    def texts(self, batch: Any, live: list, done: list[Completion]) -> list[str]:
        """A micro-batch's completions as texts, cut as evaluation cuts an answer."""
        return [batch.encoder.text(c.tokens, live[c.prompt][0].until) for c in done]

    def rewards(self, live: list, texts: list[str]) -> torch.Tensor:
        """[completions, rewards] of a micro-batch's completions (`texts`)."""
        G = self.settings.num_generations
        groups = [texts[i * G : (i + 1) * G] for i in range(len(live))]
        instances = [instance for instance, _ in live]
        return score_completions(self.settings.rewards, instances, groups)

    def batches(self, micro_batches: Sequence[Any], step: int) -> list[dict[str, Any]]:
        """The model's `grpo` batches of an optimizer step (step: 0-based): of its
        micro-batches of prompts at a generation batch's first step, then the same again (see
        the module). Collective."""
        mu = self.settings.num_iterations
        if step % mu and self.held:
            return self.held
        if step % mu:  # a checkpoint of another number of ranks: drawn again, from here
            logger.warning("GRPO: resumed inside a generation batch it does not hold: drawn again")
        out = self.generation_batch(micro_batches, step)
        if self.reference is not None:  # once per generation batch, as TRL's
            self.reference.score(out)
        if mu > 1:
            self.with_old_logps(out)
            self.held = out
        return out

    def with_old_logps(self, batches: list[dict[str, Any]]) -> None:
        """Each batch given the log-probabilities of its completion tokens under the policy
        that sampled them (the model now: before the first update; eval mode, no gradients, as
        it sampled), as a list of rows: engines cast no list to their compute dtype.
        Collective."""
        with evaluating(self.engine.model):
            for batch in batches:
                logps = self.engine.forward_eval(batch)["grpo_logps"]
                batch["grpo"]["old_logps"] = logps.float().cpu().tolist()

    def generation_batch(self, micro_batches: Sequence[Any], step: int) -> list[dict[str, Any]]:
        """The model's `grpo` batches of micro-batches of prompts at step `step`: their
        completions, drawn from the generator of its generation batch, rewarded; at a logged
        step, recorded. Collective."""
        index = step // self.settings.num_iterations
        generator = generator_for(self.seed, self.rank, index, self.device)
        with evaluating(self.engine.model), self.engine.generating() as forward:
            sampled = [self.sample(batch, generator, forward) for batch in micro_batches]
        texts = [
            self.texts(batch, live, done)
            for batch, (live, done) in zip(micro_batches, sampled, strict=True)
        ]
        tables = [
            self.table(self.rewards(live, said), done)
            for (live, done), said in zip(sampled, texts, strict=True)
        ]
        mine = torch.cat(tables)
        everyone, offset = all_gathered_rows(mine.to(self.device), self.world_size)
        everyone = everyone.cpu()
        advantages = self.advantages(everyone)[offset : offset + mine.size(0)]
        if self.logs(step):
            self.record(step, sampled, texts, mine, advantages)
        self.logged = self.batch_metrics(everyone)
        tokens = float((everyone[:, -2] * self.in_loss(everyone)).sum())  # tokens in the loss
        dapo = tokens / (self.world_size * len(micro_batches))
        out, start = [], 0
        for batch, (live, done), table in zip(micro_batches, sampled, tables, strict=True):
            end = start + table.size(0)
            in_loss = self.in_loss(table).tolist()
            prompts, tokens_of = [prompt for _, prompt in live], [c.tokens for c in done]
            pad = batch.encoder.pad_id
            out.append(
                {"grpo": grpo_batch(prompts, tokens_of, in_loss, advantages[start:end], dapo, pad)}
            )
            start = end
        return out

    def record(self, step: int, sampled: list, texts: list, mine: Any, advantages: Any) -> None:
        """The step's completion records (this rank's: its `mine` table, `advantages`), every
        rank's written by rank 0 (:mod:`.completion_records`). Collective."""
        prompts = [live[c.prompt][0].context for live, done in sampled for c in done]
        said = [text for part in texts for text in part]
        rewards = self.settings.rewards
        records = completion_records(step, self.rank, prompts, said, mine, rewards, advantages)
        written_by_rank_0(self.work_dir, step, records, self.world_size, self.device)

    def table(self, rewards: torch.Tensor, done: list[Completion]) -> torch.Tensor:
        """[completions, rewards + 2]: each completion's rewards, its length and whether the
        length cut it."""
        lengths = torch.tensor([float(len(c.tokens)) for c in done])
        truncated = torch.tensor([float(c.truncated) for c in done])
        return torch.cat([rewards, lengths[:, None], truncated[:, None]], dim=1)

    def in_loss(self, table: torch.Tensor) -> torch.Tensor:
        """Whether each completion is in the loss (a truncated one is not, with
        `mask_truncated_completions`)."""
        truncated = table[:, -1] > 0
        masked = self.settings.mask_truncated_completions
        return ~truncated if masked else torch.ones_like(truncated)

    def advantages(self, everyone: torch.Tensor) -> torch.Tensor:
        rewards = everyone[:, :-2]
        weighted = weighted_rewards(rewards, self.settings.rewards.weights)
        return group_advantages(
            weighted, self.settings.num_generations, self.settings.scale_rewards
        )

    def batch_metrics(self, everyone: torch.Tensor) -> dict[str, float]:
        """TRL's reward and completion metrics of the whole generation batch."""
        s = self.settings
        metrics = reward_metrics(
            everyone[:, :-2], s.rewards.weights, s.rewards.names, s.num_generations, s.scale_rewards
        )
        lengths = everyone[:, -2]
        metrics["completions/mean_length"] = lengths.mean()
        metrics["completions/max_length"] = lengths.max()
        metrics["completions/clipped_ratio"] = everyone[:, -1].mean()  # truncated
        return {name: float(value) for name, value in metrics.items()}

    def metrics(self, outputs: Sequence[dict[str, Any]]) -> list[dict[str, float]]:
        """The step's metrics: the generation batch's, and the loss's (clipping, entropy) over
        every micro-batch's tokens on every rank. Collective."""
        tokens = sum(output["grpo_tokens"].float().cpu() for output in outputs)
        sums = {"tokens": torch.as_tensor(tokens, dtype=torch.float64)}
        for name in outputs[0]["grpo_metrics"]:
            if name not in EXTREMES:
                sums[name] = sum(
                    o["grpo_metrics"][name].double().cpu() * o["grpo_tokens"].cpu() for o in outputs
                )
        if self.world_size > 1:
            sums = {
                k: v.cpu()
                for k, v in summed_over_ranks(
                    {k: v.to(self.device) for k, v in sums.items()}
                ).items()
            }
        total = sums.pop("tokens").clamp(min=1.0)
        loss_metrics = {name: float(value / total) for name, value in sums.items()}
        for name, op in EXTREMES.items():
            values = [o["grpo_metrics"][name] for o in outputs]
            loss_metrics[name] = extreme(values, op, self.device, self.world_size)
        return [{**self.logged, **loss_metrics}]
