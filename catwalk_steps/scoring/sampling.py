"""Sampled decoding: the next token drawn instead of the most likely one, as Hugging Face's
`generate(do_sample=True)` draws it, so that a completion sampled here is one `generate` could
have sampled (GRPO's rollouts, issue 59).

`generate`'s logits warpers, in its order: the logits divided by `temperature` (skipped at 1),
then top-k (`top_k` > 0: every token scoring below the k-th highest is removed, ties with it
kept), then top-p (`top_p` < 1: tokens sorted by probability, ascending; those whose cumulative
probability is `<= 1 - top_p` are removed, the most likely token always kept), then one
`torch.multinomial` draw over the softmax of what is left. A choice of the next token is a
function of the step's logits ([rows, vocabulary] -> [rows]): :func:`greedy` (the argmax, what
generation did before) or a :class:`Sampler`, which both generation loops take
(:func:`~.generation.chosen_tokens`).

Draws come from an explicit `torch.Generator`, never the global one: what a rank samples
depends only on its generator's seed, :func:`sampling_seed` (a run's seed, the rank, the
training step), so a run restarted at a step draws the same completions without any random
state saved. One generator draws a whole batch in one call (as `generate` does): a row's draw
depends on the rows beside it, so the same prompts in the same batch layout give the same
completions, a different layout other (equally distributed) ones.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import torch

Choice = Callable[[torch.Tensor], torch.Tensor]  # a step's logits [rows, vocab] -> tokens [rows]
SEED_BITS = 63  # a seed torch.Generator.manual_seed takes on every device


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """Each row's most likely next token (the first of equals, as `argmax` picks)."""
    return logits.argmax(dim=-1)


@dataclass(frozen=True)
class Sampling:
    """How the next token is sampled: `temperature` (> 0), `top_p` in (0, 1] (1: off), `top_k`
    (0: off), `generate`'s meanings. GRPO's block checks them for the user
    (:class:`~catwalk_steps.objectives.grpo.GrpoSettings`); here they are only asserted."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0

    def __post_init__(self) -> None:
        if not (self.temperature > 0 and 0 < self.top_p <= 1 and self.top_k >= 0):
            raise ValueError(f"sampling: impossible settings {self}")


def warped_logits(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """The logits (float32) after `generate`'s warpers in its order: temperature, top-k, top-p
    (removed tokens at -inf). With `min_tokens_to_keep` 1, as sampling without beams has it."""
    scores = logits.float()
    if sampling.temperature != 1.0:
        scores = scores / sampling.temperature
    if sampling.top_k > 0:
        k = min(sampling.top_k, scores.size(-1))
        kth = torch.topk(scores, k).values[..., -1:]
        scores = scores.masked_fill(scores < kth, -float("inf"))
    if sampling.top_p < 1.0:
        ascending, order = torch.sort(scores, descending=False)
        cumulative = ascending.softmax(dim=-1).cumsum(dim=-1)
        removed = cumulative <= 1 - sampling.top_p
        removed[..., -1:] = False  # the most likely token stays
        scores = scores.masked_fill(removed.scatter(-1, order, removed), -float("inf"))
    return scores


class Sampler:
    """A choice of the next token that samples (see the module): each call one draw per row
    from `generator`, which must be on the logits' device (CPU and CUDA generators give
    different draws from the same seed)."""

    def __init__(self, sampling: Sampling, generator: torch.Generator):
        self.sampling, self.generator = sampling, generator

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        probabilities = warped_logits(logits, self.sampling).softmax(dim=-1)
        return torch.multinomial(probabilities, 1, generator=self.generator).squeeze(1)


def sampling_seed(seed: int, rank: int, step: int) -> int:
    """The seed of a rank's draws at a training step: the first 63 bits of the BLAKE2b hash of
    `"seed:rank:step"` (decimal), so every (seed, rank, step) draws its own numbers and no
    nearby triple repeats another's, on any machine and Python."""
    digest = hashlib.blake2b(f"{seed}:{rank}:{step}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> (64 - SEED_BITS)


def generator_for(seed: int, rank: int, step: int, device: torch.device | str) -> torch.Generator:
    """A generator on `device` seeded with :func:`sampling_seed`."""
    generator = torch.Generator(device=device)
    generator.manual_seed(sampling_seed(seed, rank, step))
    return generator
