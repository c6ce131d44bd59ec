"""Standard errors of metrics from per-document values, as lm-evaluation-harness 0.4.13 computes
them (`lm_eval.api.metrics`), so that a number here and its `*_stderr` there agree:

- a mean metric (accuracy, exact match, a per-document loss): the sample standard error,
  `sqrt(var_ddof1 / n)` (`mean_stderr`);
- a metric of the whole set that is no mean (F1 over documents): lm-eval's bootstrap
  (`bootstrap_stderr`): 100000 resamples in chunks of 1000, chunk `i` drawn by Python's
  `random.Random(i).choices`, the standard deviation of the metric over the resamples. The
  draws are the same Mersenne Twister stream read through numpy (seeded by the same key),
  so a chunk costs one vectorized draw instead of a million Python calls;
- a group of subtasks weighted by size (MMLU's categories and MMLU itself): the pooled
  standard error of its parts (`pooled_sample_stderr`).

With fewer than two values there is no standard error (lm-eval writes "N/A"): None here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

BOOTSTRAP_ITERS = 100_000  # lm-eval's default `bootstrap_iters`
CHUNK = 1000  # lm-eval's resamples per seeded chunk


def sample_stddev(values: Sequence[float]) -> float:
    """The standard deviation with n - 1 in the denominator (lm-eval's `sample_stddev`)."""
    mu = sum(values) / len(values)
    return math.sqrt(sum((x - mu) ** 2 for x in values) / (len(values) - 1))


def mean_stderr(values: Sequence[float]) -> float | None:
    """The sample standard error of a mean (lm-eval's `mean_stderr`); None below 2 values."""
    if len(values) < 2:
        return None
    return sample_stddev(values) / math.sqrt(len(values))


def stderr_from_sums(total: float, squares: float, n: float) -> float | None:
    """:func:`mean_stderr` of values known by their sum, their sum of squares and their count
    (sums that add over batches and ranks: the in-loop evaluation's, :mod:`.sums`)."""
    if n < 2:
        return None
    variance = max(squares - total * total / n, 0.0) / (n - 1)
    return math.sqrt(variance / n)


def pooled_stderr(stderrs: Sequence[float | None], sizes: Sequence[int]) -> float | None:
    """The standard error of a size-weighted group from its parts' (lm-eval's
    `pooled_sample_stderr`); None when a part has none."""
    known = [s for s in stderrs if s is not None]
    if not stderrs or len(known) < len(stderrs) or sum(sizes) <= len(sizes):
        return None
    pooled = sum((n - 1) * s**2 * n for n, s in zip(sizes, known, strict=True))
    return math.sqrt(pooled / (sum(sizes) - len(sizes)) / sum(sizes))


def unweighted_mean_stderr(stderrs: Sequence[float | None]) -> float | None:
    """The standard error of a plain mean of independent means (lm-eval's
    `unweighted_mean_stderr`, a group not weighted by size: a suite's average over tasks)."""
    known = [s for s in stderrs if s is not None]
    if not stderrs or len(known) < len(stderrs):
        return None
    return math.sqrt(sum(s**2 for s in known)) / len(known)


def resample_indices(seed: int, n: int, rows: int = CHUNK) -> np.ndarray:
    """[rows, n] indices as `random.Random(seed).choices(range(n), k=n)` draws them, `rows`
    times in a row: `floor(random() * n)` on the Mersenne Twister stream that Python seeds
    from the key `[seed]` (numpy's legacy generator seeds from the same key)."""
    stream = np.random.RandomState([seed])
    return np.floor(stream.random_sample(rows * n) * float(n)).astype(np.int64).reshape(rows, n)


def bootstrap_stderr(
    statistic: Callable[[np.ndarray], np.ndarray],
    values: np.ndarray,
    iters: int = BOOTSTRAP_ITERS,
) -> float | None:
    """lm-eval's `bootstrap_stderr(f, xs, iters)`: `statistic` takes [resamples, n, ...]
    arrays of `values` (one row per resample) and returns each resample's metric."""
    if len(values) < 2:
        return None
    chunk = min(CHUNK, iters)
    metrics = [
        statistic(values[resample_indices(seed, len(values), chunk)])
        for seed in range(iters // chunk)
    ]
    return sample_stddev(np.concatenate(metrics).tolist())


def f1_of_resamples(pairs: np.ndarray) -> np.ndarray:
    """The F1 of the positive class (1) of each resample of (gold, prediction) pairs, as
    scikit-learn's `f1_score` (lm-eval's `f1_score` aggregation): 0 where undefined."""
    gold, said = pairs[..., 0] == 1, pairs[..., 1] == 1
    tp = (gold & said).sum(-1).astype(np.float64)
    fp = (~gold & said).sum(-1).astype(np.float64)
    fn = (gold & ~said).sum(-1).astype(np.float64)
    denominator = 2 * tp + fp + fn
    return np.where(denominator > 0, 2 * tp / np.where(denominator > 0, denominator, 1), 0.0)
