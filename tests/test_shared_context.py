"""Shared-context scoring (packed rows) equals one sequence at a time, for every shape of
question, every model family that takes packed rows, through `score_choices` and through the
model's forward; a model that cannot take them falls back with one log line."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from catwalk_steps.kinds.collate import Collator
from catwalk_steps.scoring.choices import score_choices
from catwalk_steps.scoring.packing import pack_rows, packed_attention, packed_rows
from catwalk_steps.scoring.rank_classifier import RankClassifier
from catwalk_steps.scoring.sequences import SequenceEncoder
from catwalk_steps.settings import Precision
from catwalk_steps.tasks.base import MultipleChoiceInstance as Instance

from .conftest import TINY_GPT2
from .distributed import run_distributed

TINY_LLAMA = {  # rotary positions, grouped-query attention
    "model_type": "llama",
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 128,
}
TINY_BLOOM = {"model_type": "bloom", "hidden_size": 32, "n_layer": 2, "n_head": 2}

# The byte-level tokenizer has one token per byte: lengths below are in characters.
UNEVEN_CONTEXTS = [
    Instance("Question: Keep bread fresh\nAnswer:", (" Seal it in a bag.", " Sun."), 0),
    Instance("Q: ok?\nA:", (" yes", " no"), 1),
    Instance("A much longer context that goes on about nothing. The end", (" x", " yz"), 1),
    Instance("", (" an empty context", " is the end-of-text token"), 0),
    # WinoGrande-style: one context per choice, so one row per choice
    Instance(("The cat sat on the mat", "The dog sat on the"), (" because", " log"), 0),
]
UNEVEN_CHOICE_COUNTS = [
    Instance("Pick:", (" a", " bb"), 0),
    Instance("Pick one of five:", (" one", " two", " three", " four", " five"), 3),
    Instance("Pick one of three:", (" left", " right", " neither of them"), 2),
]
ONE_TOKEN_CHOICES = [  # MMLU-style letters: one forward of the context scores them all
    Instance("Question: 2 + 2?\nA. 3\nB. 4\nC. 5\nD. 6\nAnswer:", ("A", "B", "C", "D"), 1),
    Instance("Question: sky?\nA. blue\nB. green\nAnswer:", ("A", "B"), 0),
]
LONG = "Question: " + "very " * 12 + "long\nAnswer:"
TRUNCATED_CONTEXTS = [  # max_length 24: the context is cut on the left
    Instance(LONG, (" abc", " xyz"), 0),  # same cut for both choices: one shared row
    Instance(LONG, (" a", " a longer answer"), 1),  # cut differently: one row per choice
]
CASES = {
    "uneven contexts": (UNEVEN_CONTEXTS, 256),
    "uneven choice counts": (UNEVEN_CHOICE_COUNTS, 256),
    "one-token choices": (ONE_TOKEN_CHOICES, 256),
    "left-truncated contexts": (TRUNCATED_CONTEXTS, 24),
}
MODELS = {"gpt2": TINY_GPT2, "gpt2 eager": {**TINY_GPT2, "attn_implementation": "eager"}}
MODELS["llama"] = TINY_LLAMA


def reference_scores(model: RankClassifier, instances, max_length: int = 256):
    """log p(continuation | context) from one unpadded sequence per choice, in float64, without
    any of the scoring code, as lm-evaluation-harness 0.4 defines it: whitespace ending the
    context moves to the continuation; the continuation's tokens are those of the whole pair
    past the context's; an empty context is the prefix (end-of-text) token; a pair longer than
    `max_length + 1` tokens loses context tokens on the left; the last token is only a target.
    (The byte-level tokenizer adds no special tokens.)"""
    tokenizer = model.tokenizer

    def encode(text):
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    out = []
    for instance in instances:
        row = []
        for context, choice in instance.pairs():
            stripped = context.rstrip()
            continuation = context[len(stripped) :] + choice
            context_ids = encode(stripped) if stripped else [tokenizer.eos_token_id]
            whole = encode(stripped + continuation) if stripped else context_ids + encode(choice)
            choice_ids = whole[len(context_ids) :]
            ids = (context_ids + choice_ids)[-(max_length + 1) :]
            with torch.no_grad():
                log_probs = model.lm(torch.tensor([ids[:-1]])).logits[0].double().log_softmax(-1)
            start = len(ids) - len(choice_ids)
            row.append(sum(float(log_probs[p - 1, ids[p]]) for p in range(start, len(ids))))
        out.append(row)
    return out


@pytest.fixture(scope="module", params=list(MODELS))
def model(request) -> RankClassifier:
    model = RankClassifier(config=MODELS[request.param], tokenizer="catwalk::byte_level")
    assert model.shares_contexts()
    return model.eval()


def no_full_sequences(*args, **kwargs):
    raise AssertionError("scored one sequence per choice instead of packed rows")


@pytest.mark.parametrize("case", list(CASES))
def test_shared_context_scores_equal_one_sequence_at_a_time(model, case, monkeypatch):
    instances, max_length = CASES[case]
    monkeypatch.setattr(model, "score_sequences", no_full_sequences)
    # Batches of 3 sequences: rows split across batches, a 5-choice row alone in one.
    shared = score_choices(model, instances, batch_size=3, max_length=max_length, progress=False)
    expected = reference_scores(model, instances, max_length)
    for got, want in zip(shared, expected, strict=True):
        assert got == pytest.approx(want, rel=1e-5, abs=1e-5)


def test_rows_share_a_context_only_where_its_tokens_are_the_same():
    encoder = SequenceEncoder(RankClassifier(config=TINY_GPT2, tokenizer="catwalk::byte_level")
                              .tokenizer, max_length=24)  # fmt: skip
    rows = packed_rows(encoder.sequences(TRUNCATED_CONTEXTS + ONE_TOKEN_CHOICES))
    assert [r.sequences for r in rows] == [(0, 1), (2,), (3,), (4, 5, 6, 7), (8, 9)]
    assert [len(r.context) for r in rows] == [21, 23, 9, 24, 24]  # max_length + 1 - choice
    assert rows[3].length == len(rows[3].context)  # one-token choices add nothing to a row


def test_packed_layout_positions_segments_and_targets():
    from catwalk_steps.scoring.packing import PackedRow

    rows = [
        PackedRow((1, 2, 3), ((4, 5), (6,), (7, 8, 9)), (0, 1, 2)),
        PackedRow((1,), ((2,),), (3,)),
    ]
    packed = pack_rows(rows, pad_id=0)  # fmt: skip
    assert packed["packed_input_ids"].tolist() == [[1, 2, 3, 4, 7, 8], [1, 0, 0, 0, 0, 0]]
    assert packed["packed_position_ids"].tolist() == [[0, 1, 2, 3, 3, 4], [0, 0, 0, 0, 0, 0]]
    assert packed["packed_segments"].tolist() == [[0, 0, 0, 1, 3, 3], [0, -1, -1, -1, -1, -1]]
    # Logits at (0, 2) predict 4, 6 and 7; (0, 3) predicts 5; (0, 4), (0, 5) predict 8, 9.
    predictors = list(zip(packed["packed_predict_rows"].tolist(),
                          packed["packed_predict_cols"].tolist(), strict=True))  # fmt: skip
    assert predictors == [(0, 2), (0, 3), (0, 4), (0, 5), (1, 0)]
    assert packed["packed_target_ids"].tolist() == [4, 5, 6, 7, 8, 9, 2]
    assert packed["packed_target_predictor"].tolist() == [0, 1, 0, 0, 2, 3, 4]
    assert packed["packed_target_sequence"].tolist() == [0, 0, 1, 2, 2, 2, 3]
    mask = packed_attention(packed["packed_segments"])[:, 0]
    assert mask[0, 4].tolist() == [True, True, True, False, True, False]  # not choice 0's token
    assert mask[0, 5].tolist() == [True, True, True, False, True, True]
    assert mask[1, 3].tolist() == [False, False, False, True, False, False]  # padding: itself


@pytest.mark.parametrize("objective", ["lm", "rank"])
def test_forward_scores_loss_and_gradients_equal_the_full_sequences(objective):
    """Validation and the "rank" objective's training run the packed rows in the forward."""
    model = RankClassifier(config=TINY_LLAMA, tokenizer="catwalk::byte_level", objective=objective)
    instances = UNEVEN_CONTEXTS + UNEVEN_CHOICE_COUNTS + ONE_TOKEN_CHOICES
    batch = Collator("catwalk::byte_level")(instances)
    flat = {key: value for key, value in batch.items() if key != "packed"}
    model.eval()
    with torch.no_grad():
        shared, full = model(**batch), model(**flat)
    for key in ("scores", "loss", "acc", "acc_norm"):
        assert torch.allclose(shared[key], full[key], rtol=1e-5, atol=1e-5), key
    expected = reference_scores(model, instances)
    for i, want in enumerate(expected):
        assert shared["scores"][i, : len(want)].tolist() == pytest.approx(want, rel=1e-5, abs=1e-5)
    if objective == "rank":  # trained through the packed rows: same gradients
        model.train()
        grads = []
        for inputs in (batch, flat):
            model.zero_grad()
            model(**inputs)["loss"].backward()
            grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
        assert torch.allclose(grads[0], grads[1], rtol=1e-4, atol=1e-6)


def test_bf16_autocast_keeps_float32_scores_close_to_float32():
    model = RankClassifier(config=TINY_GPT2, tokenizer="catwalk::byte_level").eval()
    instances = UNEVEN_CONTEXTS + ONE_TOKEN_CHOICES
    fp32 = score_choices(model, instances, progress=False)
    bf16 = score_choices(model, instances, precision=Precision("bf16"), progress=False)
    full = score_choices(model, instances, precision=Precision("bf16"), progress=False,
                         share_contexts=False)  # fmt: skip
    for got, same_precision, want in zip(bf16, full, fp32, strict=True):
        assert got == pytest.approx(want, rel=0.02)
        assert got == pytest.approx(same_precision, rel=0.02)


def test_a_model_without_packed_rows_falls_back_with_one_log_line(caplog):
    model = RankClassifier(config=TINY_BLOOM, tokenizer="catwalk::byte_level").eval()
    assert model.packing_unsupported == "its forward takes no position_ids"
    instances = UNEVEN_CONTEXTS + ONE_TOKEN_CHOICES
    with caplog.at_level(logging.INFO, logger="catwalk_steps.scoring.shared_context"):
        first = score_choices(model, instances, progress=False)
        score_choices(model, instances, progress=False)
        model(**Collator("catwalk::byte_level")(instances))
    lines = [r.getMessage() for r in caplog.records if "shared-context" in r.getMessage()]
    assert lines == [
        "shared-context scoring: BloomForCausalLM cannot take packed rows (its forward takes "
        "no position_ids); scoring one sequence per choice"
    ]
    for got, want in zip(first, reference_scores(model, instances), strict=True):
        assert got == pytest.approx(want, rel=1e-5, abs=1e-5)


def fsdp2_evaluation(rank, world_size, port, work_dir):
    """Each rank scores its half of the questions through an FSDP2 engine (blocks wrapped):
    `forward_eval` runs the packed rows through the sharded root, as in-loop evaluation does."""
    from catwalk_steps.engines.torch_fsdp_engine import CatwalkTorchFSDPEngine

    from .test_engines import BLOCKS, lazy_model, lazy_optimizer, train_config

    engine = CatwalkTorchFSDPEngine(
        train_config(rank, world_size, port, Path(work_dir)),
        lazy_model(),
        lazy_optimizer(),
        modules_to_wrap=[BLOCKS],
    )
    engine.model.eval()  # as the loop's validation does
    engine.model.score_sequences = no_full_sequences  # the packed rows must serve
    instances = FSDP_QUESTIONS[rank::world_size]
    batch = Collator("catwalk::byte_level")(instances)
    assert "packed" in batch
    return engine.forward_eval(batch)["scores"].tolist()


FSDP_QUESTIONS = UNEVEN_CONTEXTS + UNEVEN_CHOICE_COUNTS + ONE_TOKEN_CHOICES


@pytest.mark.distributed
def test_shared_context_scores_inside_a_two_process_fsdp2_evaluation(tmp_path):
    per_rank = run_distributed(fsdp2_evaluation, tmp_path, str(tmp_path), init=True)
    model = RankClassifier(config=TINY_GPT2, tokenizer="catwalk::byte_level").eval()
    for rank, scores in enumerate(per_rank):
        instances = FSDP_QUESTIONS[rank :: len(per_rank)]
        for got, want in zip(scores, reference_scores(model, instances), strict=True):
            assert got[: len(want)] == pytest.approx(want, rel=1e-5, abs=1e-5)


def test_every_model_family_scores_packed_rows_as_full_sequences(tmp_path):
    """The eight tested families: OPT (whose causal LM calls its decoder, not its base model),
    Mistral (a sliding window of 16 tokens, shorter than these rows), Gemma (a scaled, tied
    head) and the rest give the full-sequence path's scores from packed rows."""
    from .families import FAMILIES, model_spec, save_llama_style_tokenizer

    tokenizers = {
        "byte_level": "catwalk::byte_level",
        "llama_style": save_llama_style_tokenizer(tmp_path),
    }
    instances = UNEVEN_CONTEXTS + ONE_TOKEN_CHOICES
    for family in FAMILIES:
        spec = {k: v for k, v in model_spec(family, tokenizers).items() if k != "type"}
        model = RankClassifier(**spec).eval()
        assert model.shares_contexts(), family
        shared = score_choices(model, instances, progress=False)
        full = score_choices(model, instances, progress=False, share_contexts=False)
        for got, want in zip(shared, full, strict=True):
            assert got == pytest.approx(want, rel=1e-5, abs=1e-5), family
