"""Rollouts' speed-ups (issue 59's bench) draw what the plain loop draws: a cache with room for
the completions (no concatenation per token) holds what transformers' concatenating cache holds,
and feeding only the rows not done samples the same completions, draw for draw, as feeding
every row until the last is done."""

from __future__ import annotations

import pytest
import torch
from transformers.cache_utils import DynamicCache

from catwalk_steps.scoring.cache_room import RoomyLayer, with_room
from catwalk_steps.scoring.generation import Ranks, forward_step, started
from catwalk_steps.scoring.rank_classifier import RankClassifier
from catwalk_steps.scoring.rollouts import RolloutSettings, rollouts
from catwalk_steps.scoring.sampling import Sampler, Sampling, generator_for

from .conftest import TINY_GPT2
from .test_sampling import QUESTIONS, counted, prompts_of


def states(rows: int, length: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    shape = (rows, 2, length, 4)
    return [(torch.randn(shape, generator=generator), torch.randn(shape, generator=generator))
            for _ in range(2)]  # fmt: skip


def test_a_cache_with_room_holds_what_the_concatenating_cache_holds():
    """Through copies of rows (a group's), steps past the room (the buffers grow), rows leaving
    (moved down in place) and more steps, each layer's keys and values equal the plain cache's;
    rows to keep must ascend."""
    plain = DynamicCache(ddp_cache_data=states(3, 5, 0))
    roomy = DynamicCache(ddp_cache_data=states(3, 5, 0))
    with_room(roomy, 2)
    assert all(type(layer) is RoomyLayer for layer in roomy.layers)
    plain.batch_repeat_interleave(2)
    roomy.batch_repeat_interleave(2)
    rows = 6
    for step, keep in enumerate([None, None, [0, 2, 3, 5], None, [1, 3], None]):
        if keep is not None:
            for cache in (plain, roomy):
                cache.batch_select_indices(torch.tensor(keep))
            rows = len(keep)
        for layer, (keys, values) in enumerate(states(rows, 1, step + 1)):
            want = plain.update(keys, values, layer)
            got = roomy.update(keys, values, layer)
            assert all(torch.equal(w, g) for w, g in zip(want, got, strict=True))
    assert roomy.get_seq_length() == plain.get_seq_length() == 11
    with pytest.raises(ValueError, match="must ascend"):
        roomy.batch_select_indices(torch.tensor([1, 0]))


@pytest.fixture(scope="module")
def ending_model() -> RankClassifier:
    """The tiny GPT-2 with its end-of-text row scaled up: completions end at many lengths."""
    model = RankClassifier(config=TINY_GPT2, tokenizer="catwalk::byte_level", init_seed=4).eval()
    with torch.no_grad():
        model.lm.get_input_embeddings().weight[model.tokenizer.eos_token_id] *= 30.0
    return model


def every_row_fed(model, prompts, settings: RolloutSettings, generator) -> list[list[int]]:
    """The rollouts as they were: the model's own cache, every row fed until the last ends."""
    step = forward_step(lambda batch: model(**batch))
    decoding, first = started(step, prompts, settings.pad_id, Ranks(), True)
    logits = decoding.expand(first, settings.num_generations)
    choose = Sampler(settings.sampling, generator)
    tokens: list[list[int]] = [[] for _ in range(logits.size(0))]
    done = [False] * len(tokens)
    while True:
        chosen = choose(logits).tolist()
        for row, token in enumerate(chosen):
            if not done[row]:
                tokens[row].append(token)
                done[row] = token in settings.eos_ids or len(tokens[row]) == 12
        if all(done):
            return tokens
        logits = decoding.advance(chosen)


@pytest.mark.parametrize("sampling", [Sampling(), Sampling(temperature=0.8, top_p=0.9)], ids=str)
def test_feeding_only_the_rows_not_done_samples_what_feeding_every_row_does(ending_model, sampling):
    """3 prompts, G = 4, at most 12 tokens, most completions ending early at end-of-text: the
    same completions as the plain loop draws from the same generator, while the forwards feed
    fewer and fewer rows."""
    prompts = prompts_of(ending_model, QUESTIONS)
    eos = {ending_model.tokenizer.eos_token_id}
    settings = RolloutSettings(4, sampling, 12, eos, 0)
    calls: list = []
    with torch.no_grad():
        want = every_row_fed(ending_model, prompts, settings, generator_for(2, 0, 3, "cpu"))
        made = rollouts(counted(ending_model, calls), prompts, settings,
                        generator_for(2, 0, 3, "cpu"))  # fmt: skip
    assert [c.tokens for c in made] == want
    lengths = sorted(len(c.tokens) for c in made)
    assert lengths[0] < 6 and lengths[-1] == 12 and len(set(lengths)) >= 4
    fed = [rows for rows, _ in calls[2:]]  # after the shared prefix's and the prompts'
    assert fed[0] == 12 and fed == sorted(fed, reverse=True) and fed[-1] < 12
