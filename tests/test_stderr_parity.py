"""Standard errors equal lm-evaluation-harness 0.4.13's `*_stderr` (to 1e-6) on per-document
values whose standard errors lm-eval itself computed (tests/fixtures/lm_eval_stderr.json, made
by tests/fixtures/make_stderr_fixture.py in a throwaway venv): mean metrics (acc, acc_norm,
exact match, a per-document loss), a bootstrapped F1, and MMLU's pooled groups; and an
ai2-olmo-eval label's, computed from its records, against a direct computation."""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from catwalk_steps.kinds import ResultContext, kind_named
from catwalk_steps.kinds.multiple_choice import task_metrics
from catwalk_steps.metrics.records import grouped_stderrs, mean_of, stderr_key, stderrs
from catwalk_steps.metrics.stderr import bootstrap_stderr, f1_of_resamples, resample_indices
from catwalk_steps.tasks import MultipleChoiceInstance
from catwalk_steps.tasks.olmo_eval_labels import OlmoEvalInstance

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "lm_eval_stderr.json").read_text())


def records_of(**values: list) -> list[dict]:
    """Records with these per-document values (one list per metric)."""
    n = len(next(iter(values.values())))
    return [{"doc": i, "metrics": {k: v[i] for k, v in values.items()}} for i in range(n)]


@pytest.mark.parametrize("metric", ["acc", "acc_norm", "exact_match", "ce_loss"])
def test_a_mean_metrics_stderr_is_lm_evals(metric):
    values = FIXTURE["mean"]["values"][metric]
    ours = stderrs(records_of(**{metric: values}))
    assert ours[f"{metric}_stderr"] == pytest.approx(FIXTURE["mean"]["stderr"][metric], abs=1e-6)


def test_a_filtered_metrics_stderr_is_named_as_lm_eval_names_it():
    values = FIXTURE["mean"]["values"]["exact_match"]
    ours = stderrs(records_of(**{"exact_match,none": values}))
    assert list(ours) == ["exact_match_stderr,none"] == [stderr_key("exact_match,none")]
    assert ours["exact_match_stderr,none"] == pytest.approx(
        FIXTURE["mean"]["stderr"]["exact_match"], abs=1e-6
    )


def test_a_bootstrapped_f1s_stderr_is_lm_evals():
    """Same resamples as lm-eval's `random.Random(i).choices` chunks (the fixture's five; ours
    default to lm-eval's hundred)."""
    pairs = np.asarray(FIXTURE["f1"]["pairs"])
    assert f1_of_resamples(pairs[None])[0] == pytest.approx(FIXTURE["f1"]["value"], abs=1e-12)
    ours = bootstrap_stderr(f1_of_resamples, pairs, FIXTURE["f1"]["iters"])
    assert ours == pytest.approx(FIXTURE["f1"]["stderr"], abs=1e-6)


def test_the_bootstrap_draws_what_pythons_random_draws():
    rows = np.arange(23)[resample_indices(7, 23, 4)]
    draw = random.Random(7)
    assert rows.tolist() == [draw.choices(list(range(23)), k=23) for _ in range(4)]


def mmlu_documents(per_subject: int | None = None) -> tuple[list, list]:
    """MMLU-shaped: the fixture's subjects (their first `per_subject` documents) as instances
    whose first choice is right where the document's acc is 1, and their choices' scores."""
    instances, scores = [], []
    for name, subject in FIXTURE["mmlu"]["subjects"].items():
        for right in subject["acc"][:per_subject]:
            instances.append(MultipleChoiceInstance("q", (" a", " b"), 0, subtask=name))
            scores.append([-1.0, -2.0] if right else [-2.0, -1.0])
    return instances, scores


def mmlu_result(per_subject: int | None = None) -> tuple[dict, dict[str, str]]:
    """:func:`mmlu_documents` through the multiple-choice kind's result."""
    instances, scores = mmlu_documents(per_subject)
    groups = {name: subject["category"] for name, subject in FIXTURE["mmlu"]["subjects"].items()}
    task = type("Spec", (), {"spec": type("S", (), {"subtask_groups": groups})})()
    result = kind_named("multiple_choice").result(instances, scores, ResultContext(task=task))
    return result, groups


def in_the_loop(instances: list, scores: list, batch_size: int = 4) -> dict:
    """The multiple-choice kind's metrics as the loop computes them (:func:`kind_metrics`):
    each batch collated as the loop's loader collates it, its forward returning what the
    model's does (from these scores: :func:`choice_metrics`), the sums added, then computed."""
    from catwalk_steps.kinds import Collator, Scorer
    from catwalk_steps.kinds.multiple_choice import choice_tensors
    from catwalk_steps.scoring.logprobs import choice_metrics
    from catwalk_steps.training.in_loop import kind_metrics

    starts = range(0, len(instances), batch_size)
    spans = iter([slice(start, start + batch_size) for start in starts])

    def forward(batch: dict) -> dict:
        span = next(spans)
        padded, chars, labels = choice_tensors(instances[span], scores[span])
        outputs = choice_metrics(padded, labels, chars, batch["weights"].double())
        return {**outputs, "loss": torch.tensor(0.0)}

    collate = Collator("catwalk::byte_level")
    batches = [collate(instances[start : start + batch_size]) for start in starts]
    kind, scorer = kind_named("multiple_choice"), Scorer(forward=forward, model=None)
    return kind_metrics(kind, scorer, batches, instances, torch.device("cpu"), False)


def test_mmlus_subjects_categories_and_whole_have_lm_evals_pooled_stderr():
    result, _ = mmlu_result()
    expected = FIXTURE["mmlu"]
    for name, stderr in expected["subject_stderr"].items():
        assert result["subtasks"][name]["acc_stderr"] == pytest.approx(stderr, abs=1e-6), name
    for name, stderr in expected["category_stderr"].items():
        assert result["groups"][name]["acc_stderr"] == pytest.approx(stderr, abs=1e-6), name
    assert result["acc_stderr"] == pytest.approx(expected["stderr"], abs=1e-6)


def test_records_average_to_the_metrics_they_come_with():
    result, groups = mmlu_result()
    records = result["records"]
    assert (
        mean_of(records, "acc") == result["acc"]
        and mean_of(records, "acc_norm") == result["acc_norm"]
    )
    again = task_metrics(
        [MultipleChoiceInstance("q", (" a", " b"), 0, subtask=r["subtask"]) for r in records],
        [r["answer"]["logprobs"] for r in records],
        groups,
    )
    grouped_stderrs(again, records, groups)
    assert again["acc_stderr"] == result["acc_stderr"]


OLMO_CHOICES = [(" a", " bb", " ccc"), (" dd", " e", " ffff"), (" g", " hh", " i")] * 4


def olmo_documents(metric: str) -> tuple[list, list, list | None]:
    generator = torch.Generator().manual_seed(3)
    scores = (-torch.rand(12, 3, generator=generator) * 10).tolist()
    bare = (-torch.rand(12, 3, generator=generator) * 10 - 1).tolist()
    instances = [
        OlmoEvalInstance(context="c", choices=choices, label=i % 3, metric=metric)
        for i, choices in enumerate(OLMO_CHOICES)
    ]
    return instances, scores, bare if metric == "pmi_dc" else None


def direct(values: list[float]) -> float:
    mu = sum(values) / len(values)
    return math.sqrt(sum((v - mu) ** 2 for v in values) / (len(values) - 1) / len(values))


@pytest.mark.parametrize("metric", ["acc", "len_norm", "pmi_dc", "ce_loss", "bpb"])
def test_an_olmo_eval_labels_stderr_is_the_direct_one(metric):
    """Per document, computed here from the scores alone: right or not (by the score, per
    character, or over the unconditioned score), the gold continuation's loss per character
    and bits per byte; each metric's standard error is theirs."""
    instances, scores, bare = olmo_documents(metric)
    answers = scores + (bare or [])
    result = kind_named("olmo_eval").result(instances, answers, ResultContext())
    picked, ce, bits = [], [], []
    for i, (instance, row) in enumerate(zip(instances, scores, strict=True)):
        gold = instance.choices[instance.label]
        chars = [len(c) for c in instance.choices]
        by = {
            "acc": row,
            "len_norm": [s / n for s, n in zip(row, chars, strict=True)],
            "pmi_dc": [s / u for s, u in zip(row, (bare or scores)[i], strict=True)],
        }.get(metric, row)
        picked.append(float(max(range(3), key=by.__getitem__) == instance.label))
        ce.append(-row[instance.label] / len(gold))
        bits.append(-row[instance.label] / len(gold.encode()) * 1.44269504089)
    if metric in ("acc", "len_norm", "pmi_dc"):
        assert result[f"{metric}_v2_stderr"] == pytest.approx(direct(picked), abs=1e-9)
    if metric in ("acc", "len_norm", "ce_loss"):
        assert result["ce_loss_v2_stderr"] == pytest.approx(direct(ce), rel=1e-6)
    if metric in ("acc", "len_norm", "bpb"):
        assert result["bpb_v2_stderr"] == pytest.approx(direct(bits), rel=1e-6)
    for name in result:
        if name.endswith("_stderr"):
            metric_name = name[: -len("_stderr")]
            assert mean_of(result["records"], metric_name) == pytest.approx(
                result[metric_name], rel=1e-9
            ), name


def test_an_olmo_eval_f1_labels_stderr_is_the_bootstrap_of_its_pairs():
    instances, scores, _ = olmo_documents("f1")
    result = kind_named("olmo_eval").result(instances, scores, ResultContext())
    pairs = [record["metrics"]["f1_v2"] for record in result["records"]]
    gold = [int(i.label == 0) for i in instances]
    said = [int(max(range(3), key=row.__getitem__) == 0) for row in scores]
    assert pairs == [list(p) for p in zip(gold, said, strict=True)]
    stderr = bootstrap_stderr(f1_of_resamples, np.asarray(pairs))
    assert result["f1_v2_stderr"] == stderr and stderr > 0


def test_in_the_loop_the_standard_errors_are_the_records_ones():
    """The in-loop evaluation knows sums only (added over batches and ranks): its standard
    errors, from the sums of squares, are the evaluate step's, from the records."""
    from catwalk_steps.kinds.olmo_eval import document_sums, lengths_tensor, score_matrix

    for metric in ("acc", "len_norm", "pmi_dc", "ce_loss", "bpb"):
        instances, scores, bare = olmo_documents(metric)
        kind = kind_named("olmo_eval")
        result = kind.result(instances, scores + (bare or []), ResultContext())
        sums = document_sums(
            score_matrix(scores, 3),
            lengths_tensor([i.choices for i in instances], 3),
            torch.tensor([i.label for i in instances]),
            torch.ones(len(instances)),
            metric,
            score_matrix(bare, 3) if bare else None,
        )
        in_loop = kind.compute({k: float(v) for k, v in sums.items()}, instances)
        errors = {k: v for k, v in in_loop.items() if k.endswith("_stderr")}
        assert errors and errors == pytest.approx(
            {k: result[k] for k in errors}, rel=1e-9, abs=1e-12
        ), metric
    instances, scores = mmlu_documents()
    plain = [replace(instance, subtask=None) for instance in instances]
    result = kind_named("multiple_choice").result(plain, scores, ResultContext())
    loop = in_the_loop(plain, scores)
    assert loop["acc_stderr"] == pytest.approx(result["acc_stderr"], rel=1e-12)
    assert loop["acc_norm_stderr"] == pytest.approx(result["acc_norm_stderr"], rel=1e-12)


def test_a_grouped_tasks_error_bar_is_the_same_in_the_loop_and_after():
    """MMLU in the loop (subjects mixed in batches) and in the evaluate step: the same
    accuracy and the same error bar, lm-eval's pooled over the subjects; with one document per
    subject none in either (lm-eval: "N/A"), where the loop once showed the bar of all the
    documents taken as one task."""
    result, _ = mmlu_result()
    loop = in_the_loop(*mmlu_documents())
    assert loop["count"] == result["n"] and loop["acc"] == result["acc"]
    assert result["acc_stderr"] == pytest.approx(FIXTURE["mmlu"]["stderr"], abs=1e-6)
    for key in ("acc_stderr", "acc_norm_stderr"):
        assert loop[key] == pytest.approx(result[key], rel=1e-9), key
    result, _ = mmlu_result(per_subject=1)
    instances, scores = mmlu_documents(per_subject=1)
    loop = in_the_loop(instances, scores)
    assert loop["count"] == result["n"] == 6 and loop["acc"] == result["acc"]
    assert result["acc_stderr"] is loop["acc_stderr"] is None
    assert result["acc_norm_stderr"] is loop["acc_norm_stderr"] is None
    as_one_task = in_the_loop([replace(i, subtask=None) for i in instances], scores)
    assert as_one_task["acc_stderr"] > 0
