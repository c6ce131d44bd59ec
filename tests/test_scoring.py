"""Rank-classification scores: batched and padded equals one sequence at a time."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from catwalk_steps.kinds.collate import Collator, Padding
from catwalk_steps.kinds.multiple_choice import metrics_from_scores
from catwalk_steps.objectives import objective_named
from catwalk_steps.scoring.choices import score_choices
from catwalk_steps.scoring.rank_classifier import RankClassifier
from catwalk_steps.tasks.base import MultipleChoiceInstance

from .conftest import PIQA_LABELS, PIQA_ROWS, TINY_GPT2

INSTANCES = [
    MultipleChoiceInstance(
        f"Question: {row['goal']}\nAnswer:", (" " + row["sol1"], " " + row["sol2"]), label
    )
    for row, label in zip(PIQA_ROWS, PIQA_LABELS, strict=True)
] + [MultipleChoiceInstance("Question: Pick one\nAnswer:", (" a", " bb", " a much longer one"), 2)]


@pytest.fixture(scope="module")
def model() -> RankClassifier:
    model = RankClassifier(config=TINY_GPT2, tokenizer="catwalk::byte_level", init_seed=7)
    return model.eval()


def reference_score(model: RankClassifier, context: str, choice: str, max_length: int = 256):
    """log p(choice | context) from one unpadded sequence, without any of the batching code, cut
    as lm-evaluation-harness cuts it: the last `max_length + 1` tokens, all but the last read."""
    tokenizer = model.tokenizer
    context_ids = tokenizer(context, add_special_tokens=False)["input_ids"]
    choice_ids = tokenizer(choice, add_special_tokens=False)["input_ids"]
    ids = (context_ids + choice_ids)[-(max_length + 1) :]
    with torch.no_grad():
        log_probs = model.lm(torch.tensor([ids[:-1]])).logits[0].double().log_softmax(-1)
    start = len(ids) - len(choice_ids)
    return sum(float(log_probs[p - 1, ids[p]]) for p in range(start, len(ids)))


def reference_scores(model, instances, max_length=256):
    return [
        [reference_score(model, i.context, c, max_length) for c in i.choices] for i in instances
    ]


def test_sorted_batched_scoring_equals_one_sequence_at_a_time(model):
    batched = score_choices(model, INSTANCES, batch_size=3, progress=False)
    expected = reference_scores(model, INSTANCES)
    for got, want in zip(batched, expected, strict=True):
        assert got == pytest.approx(want, rel=1e-5, abs=1e-5)


def test_forward_scores_equal_reference_with_and_without_logits_to_keep(model):
    batch = Collator("catwalk::byte_level")(INSTANCES)
    expected = reference_scores(model, INSTANCES)
    for supports in (True, False):
        model.supports_logits_to_keep = supports
        with torch.no_grad():
            scores = model(**batch)["scores"]
        for i, want in enumerate(expected):
            assert scores[i, : len(want)].tolist() == pytest.approx(want, rel=1e-5, abs=1e-5)
        assert scores[0, 2] == float("-inf")  # PIQA rows have two choices, the batch three
    model.supports_logits_to_keep = True


def test_long_contexts_are_cut_on_the_left_and_choices_kept_whole(model):
    instance = MultipleChoiceInstance(
        "Question: " + "very " * 40 + "long\nAnswer:", (" x", " y"), 0
    )
    got = score_choices(model, [instance], max_length=16, progress=False)[0]
    assert got == pytest.approx(
        reference_scores(model, [instance], max_length=16)[0], rel=1e-5, abs=1e-5
    )


def test_acc_norm_divides_by_answer_characters_without_the_joining_space():
    instances = [MultipleChoiceInstance("q", (" ab", " abcd"), 1)]
    # Per character: -3/2 = -1.5 against -4/4 = -1.0: acc_norm picks the longer answer.
    metrics = metrics_from_scores(instances, [[-3.0, -4.0]])
    assert metrics == {"acc": 0.0, "acc_norm": 1.0, "n": 1}
    # With the space counted (-3/3 = -1.0 against -4/5 = -0.8) the answer would be the same,
    # so check a case where the space matters: -2/1 = -2.0 against -5/3 = -1.67.
    instances = [MultipleChoiceInstance("q", (" a", " abc"), 1)]
    assert metrics_from_scores(instances, [[-2.0, -5.0]])["acc_norm"] == 1.0
    assert metrics_from_scores(instances, [[-2.0, -6.5]])["acc_norm"] == 0.0  # -2.17 < -2.0


def test_losses_follow_their_definitions(model):
    batch = Collator("catwalk::byte_level")(INSTANCES)
    expected = torch.tensor(
        [
            [s for s in row] + [float("-inf")] * (3 - len(row))
            for row in reference_scores(model, INSTANCES)
        ]
    )
    labels = batch["labels"]
    tokenizer = model.tokenizer
    right_lengths = torch.tensor(
        [
            len(tokenizer(i.choices[i.label], add_special_tokens=False)["input_ids"])
            for i in INSTANCES
        ]
    )
    lm_loss = (-expected[torch.arange(len(INSTANCES)), labels] / right_lengths).mean()
    rank_loss = F.cross_entropy(expected, labels)
    with torch.no_grad():
        model.objective = objective_named("lm")
        assert float(model(**batch)["loss"]) == pytest.approx(float(lm_loss), abs=1e-5)
        model.train()  # training runs only the right choices; same loss
        assert float(model(**batch)["loss"]) == pytest.approx(float(lm_loss), abs=1e-5)
        model.eval()
        model.objective = objective_named("rank")
        assert float(model(**batch)["loss"]) == pytest.approx(float(rank_loss), abs=1e-5)
    model.objective = objective_named("lm")


def test_padding_items_weigh_nothing(model):
    collate = Collator("catwalk::byte_level")
    plain = collate(INSTANCES[:3])
    padded = collate(INSTANCES[:3] + [Padding(INSTANCES[3]), Padding(INSTANCES[0])])
    with torch.no_grad():
        a, b = model(**plain), model(**padded)
    for key in ("loss", "acc", "acc_norm", "count", "correct"):
        assert float(a[key]) == pytest.approx(float(b[key]), abs=1e-6), key
    assert float(b["count"]) == 3


def test_collated_batches_are_cpu_tensors_with_masks():
    batch = Collator("catwalk::byte_level", max_length=32)(INSTANCES[:2])
    assert batch["input_ids"].device.type == "cpu"
    assert batch["input_ids"].shape == batch["attention_mask"].shape
    assert batch["instance_index"].tolist() == [0, 0, 1, 1]
    assert batch["choice_index"].tolist() == [0, 1, 0, 1]
    assert batch["choice_chars"].tolist() == [
        len("Seal it in a bag."),
        len("Leave it in the sun."),
        len("Hit it with a feather."),
        len("Twist the lid hard."),
    ]
    lengths = batch["attention_mask"].sum(1)
    for row, length in enumerate(lengths):  # right padding; continuation ends the sequence
        assert (
            batch["attention_mask"][row, :length].all()
            and not batch["attention_mask"][row, length:].any()
        )
        assert batch["continuation_mask"][row, length - 1]
    assert batch["logits_from"] == int(
        (~batch["continuation_mask"] & batch["attention_mask"].bool()).sum(1).min()
    )
