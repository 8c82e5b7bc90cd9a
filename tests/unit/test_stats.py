"""The pure statistics behind the metrics: Wilson intervals, pass^k, percentiles, Brier, ECE, McNemar, cost."""

from __future__ import annotations

import math

import pytest

from api_service import stats

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("successes", "trials", "low", "high"),
    [(0, 10, 0.0, 0.2775), (5, 10, 0.2366, 0.7634), (10, 10, 0.7225, 1.0), (81, 263, 0.2553, 0.3662)],
)
def test_wilson_interval_matches_published_values(
    successes: int, trials: int, low: float, high: float
) -> None:
    """The Wilson 95 % interval matches textbook values (Newcombe 1998 and the 0/10, 5/10, 10/10 cases)."""
    interval = stats.wilson_interval(successes, trials)

    assert interval is not None
    assert interval.low == pytest.approx(low, abs=5e-4)
    assert interval.high == pytest.approx(high, abs=5e-4)


def test_wilson_interval_without_trials_is_undefined() -> None:
    """No trials give no interval rather than a fake [0, 0]."""
    assert stats.wilson_interval(0, 0) is None


@pytest.mark.parametrize(("k", "expected"), [(1, 2 / 3), (2, 1 / 3), (3, 0.0), (4, None)])
def test_pass_hat_k_is_the_chance_that_k_repeats_all_pass(k: int, expected: float | None) -> None:
    """pass^k of a case passing 2 of 3 repeats is C(2,k)/C(3,k), undefined beyond 3."""
    assert stats.pass_hat_k(2, 3, k) == (None if expected is None else pytest.approx(expected))


def test_mean_pass_hat_k_averages_cases() -> None:
    """pass^2 over a perfect case and a 2-of-3 case is the mean of 1 and 1/3."""
    assert stats.mean_pass_hat_k([(3, 3), (2, 3)], 2) == pytest.approx(2 / 3)


def test_percentile_interpolates_linearly() -> None:
    """p50 and p95 of 1..4 interpolate between order statistics like numpy."""
    assert stats.percentile([4, 1, 3, 2], 50) == pytest.approx(2.5)
    assert stats.percentile([4, 1, 3, 2], 95) == pytest.approx(3.85)
    assert stats.percentile([], 50) is None


def test_brier_score_is_the_mean_squared_gap() -> None:
    """Perfect confidence scores 0; 0.8 right and 0.6 wrong score (0.04 + 0.36) / 2."""
    assert stats.brier_score([1.0, 0.0], [True, False]) == 0.0
    assert stats.brier_score([0.8, 0.6], [True, False]) == pytest.approx(0.2)


def test_expected_calibration_error_weights_bins_by_count() -> None:
    """Four runs at 0.9 confidence, three right: ECE = |0.75 - 0.9|; a calibrated split scores 0."""
    assert stats.expected_calibration_error([0.9] * 4, [True, True, True, False]) == pytest.approx(0.15)
    assert stats.expected_calibration_error([0.55, 0.55], [True, False]) == pytest.approx(0.05)
    assert stats.expected_calibration_error([], []) is None


def test_reliability_bins_put_confidence_one_in_the_last_bin() -> None:
    """Confidence 1.0 lands in the closed last bin [0.9, 1.0]."""
    bins = stats.reliability_bins([1.0, 0.05], [True, False])

    assert bins[-1].count == 1
    assert bins[0].count == 1
    assert bins[0].accuracy == 0.0


@pytest.mark.parametrize(("b", "c", "p"), [(0, 0, 1.0), (0, 5, 0.0625), (1, 9, 0.021484375), (3, 3, 1.0)])
def test_mcnemar_exact_is_a_two_sided_binomial_test(b: int, c: int, p: float) -> None:
    """The exact McNemar p-value doubles the smaller binomial tail of the discordant pairs (capped at 1)."""
    assert stats.mcnemar_exact(b, c) == pytest.approx(p)


def test_mcnemar_exact_handles_large_counts() -> None:
    """Thousands of discordant pairs do not overflow."""
    assert math.isfinite(stats.mcnemar_exact(2000, 2400))


def test_token_cost_uses_prices_per_million() -> None:
    """1M input at $2.5 and 0.5M output at $10 cost $7.5; no price gives no cost."""
    assert stats.token_cost(1_000_000, 500_000, (2.5, 10.0)) == pytest.approx(7.5)
    assert stats.token_cost(10, 10, None) is None


def test_precision_recall_f1() -> None:
    """8 TP, 2 FP, 4 FN give precision 0.8, recall 2/3 and their harmonic mean."""
    precision, recall, f1 = stats.precision_recall_f1(8, 2, 4)

    assert precision == pytest.approx(0.8)
    assert recall == pytest.approx(2 / 3)
    assert f1 == pytest.approx(2 * 0.8 * (2 / 3) / (0.8 + 2 / 3))
