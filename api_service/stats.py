"""Pure statistics for the metrics endpoints: no I/O, no database, only numbers in and numbers out.

Formulas (the README's metrics section):
- Wilson score interval at 95 %: centre (p + z²/2n) / (1 + z²/n), half-width z·sqrt(p(1-p)/n + z²/4n²) / (1 + z²/n).
- pass^k (tau-bench): the chance that k draws without replacement from a case's n trials all pass,
  C(c, k) / C(n, k), averaged over cases.
- Brier score: mean (confidence - correct)²; expected calibration error: Σ_bins |acc - conf| · n_bin / n.
- Exact McNemar test: two-sided binomial test of the discordant pairs b, c against p = 1/2.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

Z_95 = 1.959963984540054


@dataclass(frozen=True, slots=True)
class Interval:
    low: float
    high: float


def wilson_interval(successes: float, trials: float, z: float = Z_95) -> Interval | None:
    """The Wilson score interval of a binomial proportion; None with no trials (no evidence is not zero)."""
    if trials <= 0:
        return None
    if not 0 <= successes <= trials:
        raise ValueError("successes must lie between 0 and trials")
    p = successes / trials
    z2 = z * z
    denominator = 1 + z2 / trials
    centre = (p + z2 / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials)) / denominator
    return Interval(low=max(0.0, centre - half), high=min(1.0, centre + half))


def pass_hat_k(passes: int, trials: int, k: int) -> float | None:
    """pass^k of one case: C(passes, k) / C(trials, k); None when the case has fewer than k trials."""
    if k < 1:
        raise ValueError("k must be at least 1")
    if trials < k:
        return None
    return math.comb(passes, k) / math.comb(trials, k)


def mean_pass_hat_k(cases: Sequence[tuple[int, int]], k: int) -> float | None:
    """pass^k averaged over cases given as (passes, trials); cases with fewer than k trials are left out."""
    values = [v for passes, trials in cases if (v := pass_hat_k(passes, trials, k)) is not None]
    return sum(values) / len(values) if values else None


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100) with linear interpolation between order statistics (numpy's default)."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    lower = math.floor(position)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (position - lower)


def brier_score(confidences: Sequence[float], outcomes: Sequence[bool]) -> float | None:
    """Mean squared difference between confidence and the 0/1 outcome; None with no pairs."""
    if len(confidences) != len(outcomes):
        raise ValueError("confidences and outcomes differ in length")
    if not confidences:
        return None
    return sum((c - float(o)) ** 2 for c, o in zip(confidences, outcomes, strict=True)) / len(confidences)


@dataclass(frozen=True, slots=True)
class ReliabilityBin:
    lower: float
    upper: float
    count: int
    mean_confidence: float | None
    accuracy: float | None


def reliability_bins(
    confidences: Sequence[float], outcomes: Sequence[bool], bins: int = 10
) -> list[ReliabilityBin]:
    """Equal-width confidence bins over [0, 1] (the last one closed) with their mean confidence and accuracy."""
    if len(confidences) != len(outcomes):
        raise ValueError("confidences and outcomes differ in length")
    members: list[list[tuple[float, bool]]] = [[] for _ in range(bins)]
    for confidence, outcome in zip(confidences, outcomes, strict=True):
        index = min(bins - 1, max(0, int(confidence * bins)))
        members[index].append((confidence, outcome))
    result = []
    for index, group in enumerate(members):
        n = len(group)
        result.append(
            ReliabilityBin(
                lower=index / bins,
                upper=(index + 1) / bins,
                count=n,
                mean_confidence=sum(c for c, _ in group) / n if n else None,
                accuracy=sum(1 for _, o in group if o) / n if n else None,
            )
        )
    return result


def expected_calibration_error(
    confidences: Sequence[float], outcomes: Sequence[bool], bins: int = 10
) -> float | None:
    """ECE: the count-weighted mean gap |accuracy - mean confidence| over equal-width bins; None with no pairs."""
    if not confidences:
        return None
    total = len(confidences)
    return sum(
        b.count / total * abs(b.accuracy - b.mean_confidence)
        for b in reliability_bins(confidences, outcomes, bins)
        if b.count and b.accuracy is not None and b.mean_confidence is not None
    )


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for discordant counts b (only A passed) and c (only B passed)."""
    if b < 0 or c < 0:
        raise ValueError("counts must be non-negative")
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1)) / (1 << n)
    return min(1.0, 2 * tail)


def token_cost(prompt_tokens: int, completion_tokens: int, price: tuple[float, float] | None) -> float | None:
    """US dollars for the tokens at (input, output) prices per million tokens; None without a price."""
    if price is None:
        return None
    return prompt_tokens * price[0] / 1_000_000 + completion_tokens * price[1] / 1_000_000


def precision_recall_f1(tp: int, fp: int, fn: int) -> tuple[float | None, float | None, float | None]:
    """Precision TP/(TP+FP), recall TP/(TP+FN) and their harmonic mean; None where undefined."""
    precision = tp / (tp + fp) if tp + fp else None
    recall = tp / (tp + fn) if tp + fn else None
    if precision is None or recall is None:
        return precision, recall, None
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1
