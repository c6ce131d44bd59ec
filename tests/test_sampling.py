"""Sampled decoding (issue 59's rollouts): the next token drawn as Hugging Face's
`generate(do_sample=True)` draws it (its warpers, then `torch.multinomial`, from the same
generator); G completions of each prompt with the prompt run once, reproducible per rank and
step, in lockstep under a sharded engine; completions' log-probabilities under a temperature."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers.generation.logits_process import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from catwalk_steps.scoring.continuous import continuous_generate
from catwalk_steps.scoring.generation import (
    GenerationEncoder,
    forward_step,
    greedy_generate,
)
from catwalk_steps.scoring.packing import PackedRow, pack_rows
from catwalk_steps.scoring.rank_classifier import RankClassifier
from catwalk_steps.scoring.rollouts import RolloutSettings, rollouts
from catwalk_steps.scoring.sampling import (
    Sampler,
    Sampling,
    generator_for,
    sampling_seed,
    warped_logits,
)
from catwalk_steps.scoring.shared_context import packed_log_probs, packed_log_probs_and_entropies
from catwalk_steps.tasks import GenerationInstance
from catwalk_steps.tasks.answers import AnswerScoring

from .conftest import TINY_GPT2
from .distributed import OthersStillGoing, run_distributed

SETTINGS = [
    Sampling(),
    Sampling(temperature=0.7),
    Sampling(top_k=5),
    Sampling(top_p=0.9),
    Sampling(temperature=1.3, top_k=40, top_p=0.8),
    Sampling(temperature=0.5, top_k=300, top_p=0.3),  # top_k past the vocabulary
]


@pytest.fixture(scope="module")
def model() -> RankClassifier:
    return RankClassifier(config=TINY_GPT2, tokenizer="catwalk::byte_level", init_seed=5).eval()


def prompts_of(model, texts: list[str]) -> list[list[int]]:
    return [model.tokenizer.encode(text, add_special_tokens=False) for text in texts]


def last_logits(model, prompts: list[list[int]]) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([model.lm(torch.tensor([p])).logits[:, -1] for p in prompts])


def hf_warped(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """The warpers `generate(do_sample=True)` adds for these settings (transformers'
    `_get_logits_processor`: temperature unless 1, top-k unless 0, top-p unless 1, keeping at
    least one token), applied in its order."""
    warpers = LogitsProcessorList()
    if sampling.temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(sampling.temperature))
    if sampling.top_k != 0:
        warpers.append(TopKLogitsWarper(top_k=sampling.top_k, min_tokens_to_keep=1))
    if sampling.top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p=sampling.top_p, min_tokens_to_keep=1))
    return warpers(torch.zeros((logits.size(0), 1), dtype=torch.long), logits.float())


def hf_draw(logits: torch.Tensor, sampling: Sampling, generator) -> torch.Tensor:
    """Then `generate`'s draw: softmax, one multinomial sample per row."""
    probabilities = torch.nn.functional.softmax(hf_warped(logits, sampling), dim=-1)
    return torch.multinomial(probabilities, num_samples=1, generator=generator).squeeze(1)


@pytest.mark.parametrize("sampling", SETTINGS, ids=str)
def test_a_sampled_token_is_the_one_hugging_faces_warpers_and_multinomial_draw(model, sampling):
    """The tiny model's logits, as they are and sharpened (so that top-p cuts deep): the warped
    logits are HF's (the same tokens removed, the others' values equal), and 40 draws of a
    batch of 3 rows from generators seeded alike are HF's tokens."""
    logits = last_logits(model, prompts_of(model, ["The cat sat", "1 + 1 =", "Hello"]))
    for scale in (30.0, 1.0):
        scaled = logits * scale
        warped, theirs = warped_logits(scaled, sampling), hf_warped(scaled, sampling)
        kept = theirs.isfinite()
        assert torch.equal(warped.isfinite(), kept) and torch.equal(warped[kept], theirs[kept])
        ours, generator = Sampler(sampling, torch.Generator().manual_seed(11)), torch.Generator()
        generator.manual_seed(11)
        drawn = [ours(scaled) for _ in range(40)]
        assert all(torch.equal(mine, hf_draw(scaled, sampling, generator)) for mine in drawn)
    assert len({tuple(t.tolist()) for t in drawn}) > 1  # unsharpened, it drew, not picked


def test_top_p_removes_tokens_whose_cumulative_probability_reaches_1_minus_top_p():
    """Four equal tokens (probabilities 1/4, exact): at top_p 0.5 the two whose cumulative
    probability is <= 0.5 go, as HF's `<=` removes them (a `<` would keep three); at a top_p
    so small that 1 - top_p is 1 in float32 every token's cumulative probability reaches it,
    and the most likely one stays all the same."""
    logits = torch.zeros((1, 4))
    for top_p, left in ((0.5, 2), (0.01, 1), (1e-8, 1), (0.8, 4)):
        sampling = Sampling(top_p=top_p)
        warped = warped_logits(logits, sampling)
        assert int(warped.isfinite().sum()) == left
        assert torch.equal(warped.isfinite(), hf_warped(logits, sampling).isfinite())


def test_top_k_1_is_greedy_decoding(model):
    """Sampling from the most likely token alone is the argmax: a whole greedy generation
    (lockstep, shared prefix; continuous batching) gives the same tokens with a top_k 1
    sampler."""
    encoder = GenerationEncoder(model.tokenizer, 128)
    texts = ["Once upon a time, there was a cat", "Once upon a time, there was a dog"]
    prompts = prompts_of(model, texts)
    scoring = AnswerScoring.of(None, [{"metric": "exact_match"}], "t")
    instances = [GenerationInstance(t, ("x",), (), 12, scoring) for t in texts]
    step = forward_step(lambda batch: model(**batch))
    eos = {model.tokenizer.eos_token_id}
    with torch.no_grad():
        greedy = greedy_generate(step, encoder, prompts, instances, eos)
        top_1 = Sampler(Sampling(temperature=0.3, top_k=1), torch.Generator().manual_seed(0))
        sampled = greedy_generate(step, encoder, prompts, instances, eos, choose=top_1)
        assert sampled == greedy and len(greedy[0]) == 12
        batched = continuous_generate(step, encoder, prompts, instances, eos, 1, choose=top_1)
        assert batched == greedy
        wide = Sampler(Sampling(temperature=2.0), torch.Generator().manual_seed(0))
        assert greedy_generate(step, encoder, prompts, instances, eos, choose=wide) != greedy


def counted(model, calls: list) -> object:
    """The model's decoding step, recording each forward's [rows, tokens]."""
    step = forward_step(lambda batch: model(**batch))

    def recorded(ids, mask, positions, cache):
        calls.append(tuple(ids.shape))
        return step(ids, mask, positions, cache)

    return recorded


QUESTIONS = ["Question: what is two and two? ", "Question: what is one and six? ", "Question: no"]


def rollout_settings(model, generations: int, length: int = 10, **sampling) -> RolloutSettings:
    eos = {model.tokenizer.eos_token_id}
    return RolloutSettings(generations, Sampling(**sampling), length, eos, 0)


def test_each_prompt_runs_once_and_its_group_equals_g_copies_sampled_alike(model):
    """3 prompts, G = 4: the shared prefix one forward of one row, the prompts one forward of 3
    rows, then one forward of 12 rows a token. The completions equal those of the 12 copies
    run as prompts of their own (one each) from the same generator: what the cache's copies
    give is what G prompt forwards would. Equality row by row against each row sampled alone
    is not what this tests: one generator draws a batch in one call (as `generate` does), so a
    row's draw depends on its batch, and here the two batches are laid out alike."""
    prompts = prompts_of(model, QUESTIONS)
    settings = rollout_settings(model, 4, temperature=0.9, top_p=0.95)
    expanded_calls: list = []
    with torch.no_grad():
        expanded = rollouts(
            counted(model, expanded_calls), prompts, settings, generator_for(1, 0, 7, "cpu")
        )
        copies_calls: list = []
        copied = [p for p in prompts for _ in range(4)]
        alone = RolloutSettings(1, settings.sampling, 10, settings.eos_ids, 0)
        copies = rollouts(
            counted(model, copies_calls), copied, alone, generator_for(1, 0, 7, "cpu")
        )
    assert expanded_calls[:2] == [(1, len("Question: ")), (3, len(prompts[0]) - 10)]
    assert expanded_calls[2:] == [(12, 1)] * 9  # 10 tokens each: 9 forwards after the first
    assert [c[0] for c in copies_calls[:2]] == [1, 12]  # the prompts 12 times
    assert [c.tokens for c in expanded] == [c.tokens for c in copies]
    assert [c.prompt for c in expanded] == [i // 4 for i in range(12)]
    assert all(len(c.tokens) == 10 and c.truncated for c in expanded)
    assert len({tuple(c.tokens) for c in expanded}) == 12  # a group's G completions differ


def test_a_seed_rank_and_step_draw_the_same_completions_again_and_others_draw_others(model):
    prompts = prompts_of(model, QUESTIONS[:2])
    settings = rollout_settings(model, 3, temperature=1.0, top_k=50)

    def tokens(seed: int, rank: int, step: int) -> list[list[int]]:
        with torch.no_grad():
            made = rollouts(
                counted(model, []), prompts, settings, generator_for(seed, rank, step, "cpu")
            )
        return [c.tokens for c in made]

    first = tokens(3, 0, 10)
    assert tokens(3, 0, 10) == first
    assert tokens(3, 1, 10) != first and tokens(3, 0, 11) != first and tokens(4, 0, 10) != first
    seeds = {sampling_seed(s, r, t) for s in range(3) for r in range(8) for t in range(100)}
    assert len(seeds) == 3 * 8 * 100 and max(seeds) < 2**63  # no two alike, torch takes them
    assert sampling_seed(3, 0, 10) == sampling_seed(3, 0, 10)


class Scripted:
    """A stand-in model: at step `s`, row r's next token is `script[s][r]` (every other token
    100 nats less likely: sampling picks it), r the row of the first batch (its cache says
    which rows are still fed); it counts its forwards and records the rows each feeds."""

    def __init__(self, script: list[list[int]], vocab: int = 8):
        self.script, self.vocab, self.calls, self.fed = script, vocab, 0, []

    def __call__(self, ids, mask, positions, cache):
        logits = torch.zeros((ids.shape[0], self.vocab))
        tokens = self.script[min(self.calls, len(self.script) - 1)]
        rows = range(ids.shape[0]) if cache is None or cache.rows is None else cache.rows
        for place, row in enumerate(rows):
            logits[place, tokens[row]] = 100.0
        self.calls += 1
        self.fed.append(list(rows))
        return logits, cache


class Cache:
    """What a stand-in model's cache must do: the prompt's copies, rows leaving (`rows`: the
    rows of the first batch still fed; None: all)."""

    rows: list[int] | None = None

    def batch_repeat_interleave(self, times: int) -> None:
        pass

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        kept = indices.tolist()
        self.rows = kept if self.rows is None else [self.rows[i] for i in kept]


def test_completions_keep_their_end_of_text_and_are_truncated_only_when_the_length_cuts_them():
    """3 prompts, G = 2, at most 3 tokens, EOS = 7: a completion that ends at EOS keeps it and
    is not truncated (even at exactly 3 tokens); one cut at 3 tokens is. Only the rows not done
    are fed. Ranks in lockstep: alone 3 forwards; while another rank needs 2 more steps, 5
    (the last two of one row), with the same completions; a rank with no prompt steps a
    stand-in as many times (one row) and returns none."""
    a, b, eos = 1, 2, 7
    script = [[a, eos, b], [eos, b, a, a, a, b], [a, eos, a, a, a, b], [b] * 6]
    settings = RolloutSettings(2, Sampling(temperature=0.8), 3, {eos}, 0)
    for ranks, forwards in ((None, 3), (OthersStillGoing(2), 5)):
        step = Scripted(script)
        made = rollouts(cached(step), [[a, b], [b], [a]], settings, torch.Generator(), ranks)
        want = [[a, eos], [a, b, eos], [eos], [eos], [b, a, a], [b, b, b]]
        assert [c.tokens for c in made] == want
        assert [c.truncated for c in made] == [False, False, False, False, True, True]
        assert [c.prompt for c in made] == [0, 0, 1, 1, 2, 2]
        assert step.calls == forwards
        assert step.fed == [[0, 1, 2], [0, 1, 4, 5], [1, 4, 5], [1], [1]][:forwards]
    idle = Scripted(script)
    assert rollouts(cached(idle), [], settings, torch.Generator(), OthersStillGoing(4)) == []
    assert idle.calls == 1 + 4  # the stand-in's prompt, then a step per step of the other rank
    assert idle.fed == [[0]] * 5
    with pytest.raises(ValueError, match="empty prompt"):
        rollouts(cached(idle), [[a], []], settings, torch.Generator())


def test_a_completion_ends_at_its_prompt_s_stop_sequence_and_is_not_truncated():
    """The task's stop sequences end a completion as end-of-text does (the token completing one
    kept, as evaluation's generation stops there): prompt 0 stops at the pair (b, a), prompt 1
    has none; only the completion the length cuts is truncated."""
    a, b, eos = 1, 2, 7
    script = [[b, b, b, b], [a, a, a, a], [a, a, a, a], [a, a, a, a]]
    settings = RolloutSettings(2, Sampling(), 4, {eos}, 0)
    stop = lambda i, tokens: i == 0 and list(tokens[-2:]) == [b, a]  # noqa: E731
    step = Scripted(script)
    made = rollouts(cached(step), [[a], [b]], settings, torch.Generator(), stops=stop)
    assert [c.tokens for c in made] == [[b, a]] * 2 + [[b, a, a, a]] * 2
    assert [c.truncated for c in made] == [False, False, True, True]
    assert [c.prompt for c in made] == [0, 0, 1, 1]


def cached(step: Scripted):
    def with_cache(ids, mask, positions, cache):
        logits, _ = step(ids, mask, positions, cache)
        return logits, cache or Cache()

    return with_cache


@pytest.mark.parametrize("temperature", [1.0, 0.7, 1.6])
def test_completion_log_probs_and_entropies_under_a_temperature_are_the_direct_ones(
    model, temperature
):
    """Two prompts with 3 and 1 completions, packed (each prompt once): every completion token's
    log-probability and entropy equal a direct computation (each prompt + completion alone,
    log_softmax of the logits divided by the temperature, gathered) to 1e-6; the default
    temperature is today's packed_log_probs exactly."""
    prompts = prompts_of(model, ["Question: two and two? ", "Say hi: "])
    completions = [prompts_of(model, ["four", "4", "five!"]), prompts_of(model, ["hi"])]
    rows = [PackedRow(tuple(prompts[0]), tuple(map(tuple, completions[0])), (0, 1, 2))]
    rows.append(PackedRow(tuple(prompts[1]), tuple(map(tuple, completions[1])), (3,)))
    packed = pack_rows(rows, pad_id=0)
    want_log_probs, want_entropies = [], []
    with torch.no_grad():
        for prompt, answers in zip(prompts, completions, strict=True):
            for answer in answers:
                logits = model.lm(torch.tensor([prompt + answer])).logits[0].float()
                predicting = logits[len(prompt) - 1 : -1] / temperature
                log_probs = predicting.log_softmax(-1)
                want_log_probs.append(log_probs.gather(-1, torch.tensor(answer)[:, None])[:, 0])
                want_entropies.append(-(log_probs.exp() * log_probs).sum(-1))
        log_probs, entropies = packed_log_probs_and_entropies(model.lm, packed, temperature)
        alone = packed_log_probs(model.lm, packed, temperature)
        untempered = packed_log_probs(model.lm, packed)
    torch.testing.assert_close(log_probs, torch.cat(want_log_probs), rtol=0, atol=1e-6)
    torch.testing.assert_close(entropies, torch.cat(want_entropies), rtol=0, atol=1e-6)
    assert torch.equal(alone, log_probs)
    assert torch.equal(untempered, log_probs) == (temperature == 1.0)


def sharded_rollouts(rank, world_size, port, directory, work_dir):
    """Rank 0: 3 prompts; rank 1: 1 prompt, every token ending it (its completions are done
    at their first token). Each rank's completions through FSDP2's root wrapper, in lockstep,
    and on its own, unsharded, from generators seeded alike."""
    from tango.common import Lazy, Params
    from tango.integrations.torch import Model

    from catwalk_steps.engines.scorer import AllRanks
    from catwalk_steps.engines.torch_fsdp_engine import CatwalkTorchFSDPEngine

    from .test_engines import lazy_optimizer, train_config
    from .training import BLOCKS

    spec = {"type": "catwalk::rank_classifier", "pretrained": directory}
    engine = CatwalkTorchFSDPEngine(
        train_config(rank, world_size, port, Path(work_dir)),
        Lazy(Model, Params(spec)),
        lazy_optimizer(),
        modules_to_wrap=[BLOCKS],
    )
    engine.model.eval()
    model = RankClassifier(pretrained=directory).eval()
    settings = rollout_settings(model, 2, length=6, temperature=0.9)
    if rank == 1:
        settings = RolloutSettings(2, settings.sampling, 6, set(range(len(model.tokenizer))), 0)
    prompts = prompts_of(model, QUESTIONS if rank == 0 else QUESTIONS[2:])
    calls: list = []
    step = forward_step(engine.forward_eval)
    counting = lambda *args: calls.append(1) or step(*args)  # noqa: E731
    ranks = AllRanks(torch.device("cpu"))
    sharded = rollouts(counting, prompts, settings, generator_for(5, rank, 0, "cpu"), ranks)
    with torch.no_grad():
        alone = rollouts(counted(model, []), prompts, settings, generator_for(5, rank, 0, "cpu"))
    return {"forwards": len(calls), "sharded": sharded, "alone": alone}


@pytest.mark.distributed
def test_two_ranks_under_fsdp2_sample_in_lockstep_as_each_would_alone(tmp_path):
    """Ranks with 3 and 1 prompts, the second done after one token: both run the same forwards
    (no shared prefix, as one rank has none: the prompts, then 5 steps), and each rank's
    completions are those it samples alone from the same seed."""
    directory = tmp_path / "model"
    RankClassifier(config=TINY_GPT2, tokenizer="catwalk::byte_level", init_seed=3).save_pretrained(
        directory
    )
    first, second = run_distributed(sharded_rollouts, tmp_path, str(directory), str(tmp_path))
    assert first["forwards"] == second["forwards"] == 6
    assert [len(c.tokens) for c in first["sharded"]] == [6] * 6
    assert [len(c.tokens) for c in second["sharded"]] == [1, 1]
    assert [c.truncated for c in second["sharded"]] == [False, False]
    for result in (first, second):
        assert result["sharded"] == result["alone"]
    assert first["sharded"][0].tokens != first["sharded"][1].tokens
