"""Rollouts: G sampled completions of each prompt (GRPO's groups, issue 59), each prompt run once.

The prompts' common first tokens run once for the batch (:meth:`~.decoding.Decoding.share`),
then each prompt's own tokens once (:meth:`~.decoding.Decoding.start`, one row per prompt), and
its cache is copied G times (:meth:`~.decoding.Decoding.expand`): a group shares its prompt's
keys and values instead of computing them G times as `generate` on G copies does; the cache has
room for the completions (:mod:`.cache_room`: no copy of it per token). Then every step samples
one token per row (:class:`~.sampling.Sampler`) and runs one forward of the rows not done yet.

A completion ends at an end-of-text token (kept: it is a token the policy chose, and GRPO's loss
counts it, as TRL's completion mask does), at one of its prompt's stop sequences (`stops`: the
task's `until`, where evaluation's generation stops too; the token that completes it kept, as
end-of-text is) or after `max_completion_length` tokens; it is `truncated` when neither
end-of-text nor a stop sequence ended it (TRL's meaning: cut by the length).

As greedy generation (:func:`~.generation.greedy_generate`), one step is one call of `step`, and
under a sharded engine :class:`~.generation.Ranks` keeps the ranks in lockstep: they agree on
running a shared prefix, and a rank whose completions are done (or that has no prompt: it steps
a one-token stand-in) keeps stepping, one row, until every rank is done.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import torch

from .decoding import Decoding, Step
from .generation import Ranks, started
from .sampling import Sampler, Sampling


@dataclass(frozen=True)
class Completion:
    """One sampled completion: its tokens (its end-of-text token included when it has one),
    whether the length cut it, and the index of its prompt."""

    tokens: list[int]
    truncated: bool
    prompt: int


# Whether a completion's tokens so far (of prompt `i`) end in one of its stop sequences.
Stops = Callable[[int, Sequence[int]], bool]


@dataclass(frozen=True)
class RolloutSettings:
    """What every rollout of a run shares: completions per prompt (G), how tokens are sampled,
    the most tokens a completion has, the tokens that end one, and what pads the prompts."""

    num_generations: int
    sampling: Sampling
    max_completion_length: int
    eos_ids: Collection[int]
    pad_id: int


def rollouts(
    step: Step,
    prompts: Sequence[Sequence[int]],
    settings: RolloutSettings,
    generator: torch.Generator,
    ranks: Ranks | None = None,
    share_prefix: bool = True,
    stops: Stops | None = None,
) -> list[Completion]:
    """G completions of each prompt (token ids, none empty), prompt by prompt: completions
    `i * G ... i * G + G - 1` are prompt `i`'s; `stops`: whether a stop sequence of prompt `i`
    ends them (None: none does). Draws come from `generator` (on the logits' device;
    :func:`~.sampling.generator_for`); the same prompts, settings and generator state give the
    same completions. Collective where `ranks` is: every rank calls it, with its own prompts
    (any number, none included)."""
    if any(len(prompt) == 0 for prompt in prompts):
        raise ValueError("rollouts: an empty prompt (no token to sample the first one from)")
    ranks = ranks or Ranks()
    asked = [list(p) for p in prompts] or [[settings.pad_id]]  # a stand-in keeps in step
    room = settings.max_completion_length
    decoding, first = started(step, asked, settings.pad_id, ranks, share_prefix, room)
    logits = decoding.expand(first, settings.num_generations)
    choose = Sampler(settings.sampling, generator)
    G = settings.num_generations
    ended = (lambda row, kept: stops(row // G, kept)) if stops else (lambda row, kept: False)
    tokens, cut = sampled(decoding, logits, settings, choose, ranks, ended, done=not prompts)
    if not prompts:
        return []
    return [Completion(row, cut[index], index // G) for index, row in enumerate(tokens)]


def sampled(
    decoding: Decoding,
    logits: torch.Tensor,
    settings: RolloutSettings,
    choose: Sampler,
    ranks: Ranks,
    stopped: Callable[[int, Sequence[int]], bool],
    done: bool = False,
) -> tuple[list[list[int]], list[bool]]:
    """Each row's tokens, from the first `logits` on, until every row of every rank is done
    (`done`: these rows, a stand-in's, from the start), and whether the length cut each (no
    end-of-text, no stop sequence: `stopped(row, tokens)`). Only the rows not done are fed
    (:func:`narrowed`), but each step draws for every row, in one call, the done rows from
    their last logits: torch's one-sample multinomial draws a number per row and token
    whatever the values, so a row's draw does not depend on which rows are done, the same
    draws as feeding every row (as `generate`'s static batch does) gives."""
    tokens: list[list[int]] = [[] for _ in range(logits.size(0))]
    finished = [done] * len(tokens)
    cut = [False] * len(tokens)
    fed = list(range(len(tokens)))  # the rows the forward runs, in order
    every = logits  # each row's last logits
    while True:
        chosen = choose(every).tolist()
        for row in fed:
            if not finished[row]:
                token = chosen[row]
                tokens[row].append(token)
                ending = token in settings.eos_ids or stopped(row, tokens[row])
                cut[row] = not ending and len(tokens[row]) >= settings.max_completion_length
                finished[row] = ending or cut[row]
        if not ranks.any(not all(finished)):
            return tokens, cut
        fed = narrowed(decoding, fed, finished)
        every[fed] = decoding.advance([chosen[row] for row in fed])


def narrowed(decoding: Decoding, fed: list[int], finished: list[bool]) -> list[int]:
    """The rows still to feed: those of `fed` not done, `decoding` narrowed to them; where all
    are done (other ranks are not), the first one, stepping in lockstep at a row's cost."""
    places = [place for place, row in enumerate(fed) if not finished[row]] or [0]
    if len(places) < len(fed):
        decoding.keep(places)
    return [fed[place] for place in places]
