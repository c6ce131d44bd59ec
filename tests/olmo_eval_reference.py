"""ai2-olmo-eval scoring a model its own way, the reference our olmo_eval labels are checked
against (tests/test_olmo_eval_parity.py, bench/olmo_eval_parity.py): its task class built with
its tokenizer, its `collate_fn` batches (one padded sequence per request, as OLMo's in-loop
evaluator feeds them), the model's logits, and its `ICLMetric` (update, then compute).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

from catwalk_steps.kinds.olmo_eval import (
    lengths_tensor,
    olmo_eval_metrics,
    request_values,
    score_matrix,
)
from catwalk_steps.scoring.choices import score_choices
from catwalk_steps.tasks import OlmoEvalTask
from catwalk_steps.tasks.olmo_eval_labels import label_entry

OLMO_TOKENIZER = "olmo_eval::gpt-neox-olmo-dolma-v1_5"


@dataclass
class Scored:
    """A label's metrics, each request's values `{(document, continuation): {name: value}}`,
    and the seconds scoring took."""

    metrics: dict[str, float]
    requests: dict[tuple[int, int], dict[str, float]]
    seconds: float


def olmo_eval_tokenizer(tokenizer: Any):
    """olmo_eval's tokenizer over the same file as `tokenizer` (ours), with its ids."""
    from olmo_eval import HFTokenizer

    from catwalk_steps.scoring.tokenization import olmo_eval_tokenizer_path

    return HFTokenizer(
        olmo_eval_tokenizer_path(OLMO_TOKENIZER),
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )


def reference(
    label: str,
    lm: torch.nn.Module,
    tokenizer: Any,
    max_length: int,
    documents: int | None = None,
    metric: str | None = None,
    batch_size: int = 8,
) -> Scored:
    """olmo_eval's metrics of the first `documents` documents of `label`."""
    from olmo_eval import ICLMetric

    task_class, kwargs = label_entry(label)
    if metric is not None:
        kwargs = {**kwargs, "metric_type": metric}
    task = task_class(tokenizer=olmo_eval_tokenizer(tokenizer), model_ctx_len=max_length, **kwargs)
    order = list(dict.fromkeys(sample["doc_id"] for sample in task.samples))
    kept = set(order[:documents] if documents else order)
    samples = [sample for sample in task.samples if sample["doc_id"] in kept]
    scorer = ICLMetric(task.metric_type)
    scorer.reset()  # ICLMetric's states start shared between instances until reset
    started = time.perf_counter()
    with torch.no_grad():
        for start in range(0, len(samples), batch_size):
            batch = task.collate_fn(samples[start : start + batch_size])
            logits = lm(input_ids=batch["input_ids"]).logits
            unconditioned = None
            if task.metric_type == "pmi_dc":
                unconditioned = lm(input_ids=batch["dc_input_ids"]).logits
            scorer.update(batch, logits, unconditioned)
    seconds = time.perf_counter() - started
    metrics = {key: float(value) for key, value in scorer.compute().items()}
    position = {doc_id: k for k, doc_id in enumerate(order)}
    requests: dict[tuple[int, int], dict[str, float]] = {}
    for name, state in (
        ("ll_v2", scorer.loglikelihoods),
        ("ll_v1", scorer.loglikelihoods_no_leading_space),
        ("ce_v2", scorer.celosses),
        ("ce_v1", scorer.celosses_no_leading_space),
        ("bpb_v2", scorer.bpbs),
        ("bpb_v1", scorer.bpbs_no_leading_space),
    ):
        for doc_id, cont_id, value in state:
            requests.setdefault((position[doc_id], cont_id), {}).setdefault(name, value)
    return Scored(metrics, requests, seconds)


def ours(
    label: str,
    model: Any,
    max_length: int,
    documents: int | None = None,
    metric: str | None = None,
    batch_size: int = 8,
    share_contexts: bool = True,
) -> Scored:
    """The same label scored by catwalk_steps (`catwalk::evaluate`'s functions)."""
    instances = OlmoEvalTask(label, metric, documents).evaluation_instances()
    metric_type = instances[0].metric
    started = time.perf_counter()
    scores = score_choices(
        model,
        instances,
        batch_size,
        max_length,
        progress=False,
        share_contexts=share_contexts,
        alone=True,
    )
    unconditioned = None
    if metric_type == "pmi_dc":
        unconditioned = score_choices(
            model,
            [i.unconditioned_instance() for i in instances],
            batch_size,
            max_length,
            progress=False,
            share_contexts=share_contexts,
            alone=True,
        )
    seconds = time.perf_counter() - started
    width = max(len(i.choices) for i in instances)
    values = request_values(
        score_matrix(scores, width),
        lengths_tensor([i.choices for i in instances], width),
        metric_type,
        score_matrix(unconditioned, width) if unconditioned is not None else None,
    )
    requests = {
        (d, c): {name: float(value[d, c]) for name, value in values.items()}
        for d, instance in enumerate(instances)
        for c in range(len(instance.choices))
    }
    return Scored(olmo_eval_metrics(instances, scores, unconditioned), requests, seconds)


def differences(mine: Scored, theirs: Scored) -> tuple[list[str], float]:
    """The accuracy-like metrics that differ at all (ours rounded to float32, as olmo_eval
    returns them), and the largest relative difference of any other value (metrics and
    per-request values)."""
    exact_prefixes = ("acc", "len_norm", "pmi_dc", "f1")
    unequal, worst = [], 0.0
    assert mine.metrics.keys() - {"n"} == theirs.metrics.keys(), (mine.metrics, theirs.metrics)
    assert mine.requests.keys() == theirs.requests.keys()
    pairs = [(key, mine.metrics[key], value) for key, value in theirs.metrics.items()]
    pairs += [
        (name, mine.requests[request][name], value)
        for request, values in theirs.requests.items()
        for name, value in values.items()
    ]
    for key, a, b in pairs:
        if key.startswith(exact_prefixes) and key in theirs.metrics:
            # olmo_eval returns float32 tensors: the same right answers, rounded as it rounds.
            if float(torch.tensor(a, dtype=torch.float32)) != b:
                unequal.append(key)
        elif a != b:
            worst = max(worst, abs(a - b) / max(abs(b), 1e-30))
    return unequal, worst
