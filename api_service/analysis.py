"""Pure aggregation of finished runs into the metrics the API reports: groups, confusion, model comparison.

Input is a list of `RunRecord`s (one per run, loaded by `api_service.metrics`); nothing here touches I/O.
A run *passes* when it completed, chose correctly (TP or TN) and, for a TP, got every expected parameter
right (parameter correctness 1). A failed run (error) does not pass. A *trial set* is one test case run by
one model `repeats` times; it *passes* when most of its runs pass (used to pair cases in comparisons).
"""

from __future__ import annotations

import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

import msgspec

from api_service import stats

NO_TOOL = "(none)"
NO_TOOL_EXPECTED = "(no tool expected)"
MAX_PASS_K = 20
MAX_LISTED = 500


@dataclass(frozen=True, slots=True)
class RunRecord:
    """What the metrics need of one run, flattened from the run, its case, settings and evaluation."""

    run_id: uuid.UUID
    test_case_id: uuid.UUID
    test_case_name: str
    provider: str
    model: str
    status: str
    classification: str | None = None
    confidence_score: float | None = None
    execution_time_ms: int | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    expected_server: str | None = None
    expected_tool: str | None = None
    selected_server: str | None = None
    selected_tool: str | None = None
    parameter_correctness: float | None = None
    confidence_category: str | None = None
    reasoning: str | None = None
    error_message: str | None = None
    query: str = ""
    batch_id: uuid.UUID | None = None
    created_at: datetime | None = None

    @property
    def passed(self) -> bool:
        if self.status != "completed" or self.classification not in ("TP", "TN"):
            return False
        return self.classification == "TN" or (self.parameter_correctness or 0.0) >= 0.999

    @property
    def correct(self) -> bool:
        return self.classification in ("TP", "TN")

    @property
    def expected_label(self) -> str:
        return f"{self.expected_server}.{self.expected_tool}" if self.expected_tool else NO_TOOL

    @property
    def selected_label(self) -> str:
        return f"{self.selected_server}.{self.selected_tool}" if self.selected_tool else NO_TOOL


class Estimate(msgspec.Struct):
    """A proportion with its Wilson 95 % interval and the number of observations behind it."""

    value: float | None
    low: float | None
    high: float | None
    n: float


class CaseResult(msgspec.Struct):
    test_case_id: uuid.UUID
    test_case_name: str
    model: str
    runs: int
    passed_runs: int
    pass_rate: float


class ReliabilityBinOut(msgspec.Struct):
    lower: float
    upper: float
    count: int
    mean_confidence: float | None
    accuracy: float | None


class Calibration(msgspec.Struct):
    rated_runs: int
    brier_score: float | None
    expected_calibration_error: float | None
    bins: list[ReliabilityBinOut]


class GroupMetrics(msgspec.Struct):
    """Every metric of one group of runs (the whole selection, or one model / case / tool / server)."""

    key: str
    runs: int
    completed_runs: int
    failed_runs: int
    true_positives: int
    false_positives: int
    true_negatives: int
    false_negatives: int
    precision: Estimate
    recall: Estimate
    f1_score: Estimate
    accuracy: Estimate
    parameter_accuracy: float | None
    pass_rate: Estimate
    pass_hat_k: dict[str, float]
    trial_sets: int
    flaky_cases: list[CaseResult]
    case_results: list[CaseResult]
    latency_p50_ms: float | None
    latency_p95_ms: float | None
    prompt_tokens: int | None
    completion_tokens: int | None
    cost_usd: float | None
    calibration: Calibration


def _r(value: float | None, places: int = 4) -> float | None:
    return None if value is None else round(value, places)


def estimate(successes: float, trials: float) -> Estimate:
    interval = stats.wilson_interval(successes, trials)
    return Estimate(
        value=_r(successes / trials) if trials else None,
        low=_r(interval.low) if interval else None,
        high=_r(interval.high) if interval else None,
        n=trials,
    )


def trial_sets(records: Iterable[RunRecord]) -> dict[tuple[uuid.UUID, str], list[RunRecord]]:
    """Runs keyed by (test case, model): the repeats of one case by one model."""
    sets: dict[tuple[uuid.UUID, str], list[RunRecord]] = defaultdict(list)
    for record in records:
        sets[(record.test_case_id, record.model)].append(record)
    return sets


def case_results(records: Iterable[RunRecord]) -> list[CaseResult]:
    out = []
    for (case_id, model), runs in trial_sets(records).items():
        passed = sum(1 for r in runs if r.passed)
        out.append(
            CaseResult(
                test_case_id=case_id,
                test_case_name=runs[0].test_case_name,
                model=model,
                runs=len(runs),
                passed_runs=passed,
                pass_rate=round(passed / len(runs), 4),
            )
        )
    return sorted(out, key=lambda c: (c.test_case_name, c.model))


def group_metrics(
    key: str, records: Sequence[RunRecord], prices: dict[str, tuple[float, float]]
) -> GroupMetrics:
    """All metrics of one group; proportions carry Wilson 95 % intervals."""
    completed = [r for r in records if r.status == "completed"]
    counts = Counter(r.classification for r in completed if r.classification)
    tp, fp, tn, fn = (counts.get(k, 0) for k in ("TP", "FP", "TN", "FN"))
    # F1 = TP / (TP + (FP + FN) / 2): a proportion over an effective count, so Wilson applies approximately.
    f1_trials = tp + (fp + fn) / 2
    params = [r.parameter_correctness for r in completed if r.classification == "TP"]
    cases = case_results(records)
    shortest = min((c.runs for c in cases), default=0)
    pass_k: dict[str, float] = {}
    for k in range(1, min(shortest, MAX_PASS_K) + 1):
        value = stats.mean_pass_hat_k([(c.passed_runs, c.runs) for c in cases], k)
        if value is not None:
            pass_k[str(k)] = round(value, 4)
    latencies = [float(r.execution_time_ms) for r in completed if r.execution_time_ms is not None]
    rated = [r for r in completed if r.confidence_score is not None and r.classification]
    confidences = [float(r.confidence_score or 0.0) for r in rated]
    outcomes = [r.correct for r in rated]
    with_usage = [r for r in records if r.prompt_tokens is not None or r.completion_tokens is not None]
    prompt = sum(r.prompt_tokens or 0 for r in with_usage) if with_usage else None
    completion = sum(r.completion_tokens or 0 for r in with_usage) if with_usage else None
    cost: float | None = None
    for r in with_usage:
        run_cost = stats.token_cost(r.prompt_tokens or 0, r.completion_tokens or 0, prices.get(r.model))
        if run_cost is not None:
            cost = (cost or 0.0) + run_cost
    p50 = stats.percentile(latencies, 50)
    p95 = stats.percentile(latencies, 95)
    return GroupMetrics(
        key=key,
        runs=len(records),
        completed_runs=len(completed),
        failed_runs=sum(1 for r in records if r.status == "failed"),
        true_positives=tp,
        false_positives=fp,
        true_negatives=tn,
        false_negatives=fn,
        precision=estimate(tp, tp + fp),
        recall=estimate(tp, tp + fn),
        f1_score=estimate(tp, f1_trials),
        accuracy=estimate(tp + tn, tp + fp + tn + fn),
        parameter_accuracy=_r(sum(p or 0.0 for p in params) / len(params)) if params else None,
        pass_rate=estimate(sum(1 for r in records if r.passed), len(records)),
        pass_hat_k=pass_k,
        trial_sets=len(cases),
        flaky_cases=[c for c in cases if 0 < c.passed_runs < c.runs][:MAX_LISTED],
        case_results=cases[:MAX_LISTED],
        latency_p50_ms=_r(p50, 1),
        latency_p95_ms=_r(p95, 1),
        prompt_tokens=prompt,
        completion_tokens=completion,
        cost_usd=_r(cost, 6),
        calibration=Calibration(
            rated_runs=len(rated),
            brier_score=_r(stats.brier_score(confidences, outcomes)),
            expected_calibration_error=_r(stats.expected_calibration_error(confidences, outcomes)),
            bins=[
                ReliabilityBinOut(
                    lower=b.lower,
                    upper=b.upper,
                    count=b.count,
                    mean_confidence=_r(b.mean_confidence),
                    accuracy=_r(b.accuracy),
                )
                for b in stats.reliability_bins(confidences, outcomes)
            ],
        ),
    )


GROUP_KEYS: dict[str, Callable[[RunRecord], str]] = {
    "model": lambda r: r.model,
    "test_case": lambda r: r.test_case_name,
    "tool": lambda r: r.expected_label if r.expected_tool else NO_TOOL_EXPECTED,
    "server": lambda r: r.expected_server or NO_TOOL_EXPECTED,
}


def grouped_metrics(
    records: Sequence[RunRecord], group_by: str, prices: dict[str, tuple[float, float]]
) -> list[GroupMetrics]:
    """One `GroupMetrics` per distinct key of `group_by` (model, test_case, tool or server), sorted by key."""
    key_of = GROUP_KEYS[group_by]
    groups: dict[str, list[RunRecord]] = defaultdict(list)
    for record in records:
        groups[key_of(record)].append(record)
    return [group_metrics(key, groups[key], prices) for key in sorted(groups)]


class ConfusionCell(msgspec.Struct):
    expected: str
    selected: str
    count: int


class ServerConfusion(msgspec.Struct):
    """Expected tool (rows) x selected tool (columns) for the cases that expect a tool of one server."""

    server: str
    expected_tools: list[str]
    selected_tools: list[str]
    matrix: list[list[int]]
    cells: list[ConfusionCell]


class ConfusionOut(msgspec.Struct):
    completed_runs: int
    servers: list[ServerConfusion]
    top_confusions: list[ConfusionCell]


def confusion(records: Sequence[RunRecord]) -> ConfusionOut:
    """Per expected server, the expected x selected counts; top_confusions lists the wrong pairs, worst first."""
    completed = [r for r in records if r.status == "completed"]
    by_server: dict[str, Counter[tuple[str, str]]] = defaultdict(Counter)
    for r in completed:
        by_server[r.expected_server or NO_TOOL_EXPECTED][(r.expected_label, r.selected_label)] += 1
    servers = []
    wrong: list[ConfusionCell] = []
    for server in sorted(by_server):
        counter = by_server[server]
        rows = sorted({e for e, _ in counter})
        columns = sorted({s for _, s in counter} | set(rows), key=lambda s: (s not in rows, s))
        cells = [ConfusionCell(expected=e, selected=s, count=n) for (e, s), n in sorted(counter.items())]
        wrong.extend(c for c in cells if c.expected != c.selected)
        servers.append(
            ServerConfusion(
                server=server,
                expected_tools=rows,
                selected_tools=columns,
                matrix=[[counter.get((e, s), 0) for s in columns] for e in rows],
                cells=cells,
            )
        )
    wrong.sort(key=lambda c: (-c.count, c.expected, c.selected))
    return ConfusionOut(completed_runs=len(completed), servers=servers, top_confusions=wrong[:50])


class TrialResult(msgspec.Struct):
    runs: int
    passed_runs: int
    pass_rate: float
    passed: bool


class CaseComparison(msgspec.Struct):
    test_case_id: uuid.UUID
    test_case_name: str
    results: dict[str, TrialResult]


class PairComparison(msgspec.Struct):
    """`model` against `against` over the cases both ran: regressions = `against` passed, `model` did not."""

    model: str
    against: str
    paired_cases: int
    both_passed: int
    both_failed: int
    regressions: int
    fixes: int
    p_value: float
    regressed_cases: list[str]
    fixed_cases: list[str]


class CompareOut(msgspec.Struct):
    batch_id: uuid.UUID
    other_batch_id: uuid.UUID | None
    baseline: str
    models: list[str]
    cases: list[CaseComparison]
    comparisons: list[PairComparison]


def _trials(records: Iterable[RunRecord], suffix: str = "") -> dict[tuple[uuid.UUID, str], TrialResult]:
    out = {}
    for (case_id, model), runs in trial_sets(records).items():
        passed = sum(1 for r in runs if r.passed)
        rate = passed / len(runs)
        out[(case_id, model + suffix)] = TrialResult(
            runs=len(runs), passed_runs=passed, pass_rate=round(rate, 4), passed=rate >= 0.5
        )
    return out


def _pair(
    trials: dict[tuple[uuid.UUID, str], TrialResult], names: dict[uuid.UUID, str], model: str, against: str
) -> PairComparison:
    cases = sorted({c for c, _ in trials}, key=lambda c: names[c])
    both_p = both_f = 0
    regressed: list[str] = []
    fixed: list[str] = []
    paired = 0
    for case in cases:
        a, b = trials.get((case, against)), trials.get((case, model))
        if a is None or b is None:
            continue
        paired += 1
        if a.passed and b.passed:
            both_p += 1
        elif not a.passed and not b.passed:
            both_f += 1
        elif a.passed:
            regressed.append(names[case])
        else:
            fixed.append(names[case])
    return PairComparison(
        model=model,
        against=against,
        paired_cases=paired,
        both_passed=both_p,
        both_failed=both_f,
        regressions=len(regressed),
        fixes=len(fixed),
        p_value=round(stats.mcnemar_exact(len(regressed), len(fixed)), 6),
        regressed_cases=regressed[:MAX_LISTED],
        fixed_cases=fixed[:MAX_LISTED],
    )


def compare(
    batch_id: uuid.UUID,
    records: Sequence[RunRecord],
    baseline: str | None,
    other_batch_id: uuid.UUID | None = None,
    other_records: Sequence[RunRecord] = (),
) -> CompareOut:
    """Per case which model passed; every model against the baseline, and (with another batch) each model's
    results in the other batch against its results in this one, with an exact McNemar p-value."""
    models = sorted({r.model for r in records})
    chosen = baseline or (models[0] if models else "")
    names = {r.test_case_id: r.test_case_name for r in [*records, *other_records]}
    trials = _trials(records)
    comparisons = [_pair(trials, names, m, chosen) for m in models if m != chosen]
    columns = list(models)
    if other_batch_id is not None:
        suffix = f"@{str(other_batch_id)[:8]}"
        other = _trials(other_records, suffix)
        trials.update(other)
        other_models = sorted({r.model for r in other_records})
        columns += [m + suffix for m in other_models]
        comparisons += [_pair(trials, names, m + suffix, m) for m in other_models if m in models]
    cases = []
    for case_id in sorted({c for c, _ in trials}, key=lambda c: names[c]):
        results = {m: t for (c, m), t in trials.items() if c == case_id}
        cases.append(
            CaseComparison(
                test_case_id=case_id,
                test_case_name=names[case_id],
                results={m: results[m] for m in columns if m in results},
            )
        )
    return CompareOut(
        batch_id=batch_id,
        other_batch_id=other_batch_id,
        baseline=chosen,
        models=columns,
        cases=cases,
        comparisons=comparisons,
    )


class FailureOut(msgspec.Struct):
    """A run that did not pass, with what was expected, what was chosen and why it was scored so."""

    run_id: uuid.UUID
    test_case_id: uuid.UUID
    test_case_name: str
    query: str
    model: str
    provider: str
    status: str
    classification: str | None
    expected: str
    selected: str
    confidence_score: float | None
    reasoning: str | None
    error_message: str | None


def failures(records: Sequence[RunRecord], limit: int = MAX_LISTED) -> list[FailureOut]:
    """The runs that did not pass, by case then model (finished ones only)."""
    out = [
        FailureOut(
            run_id=r.run_id,
            test_case_id=r.test_case_id,
            test_case_name=r.test_case_name,
            query=r.query,
            model=r.model,
            provider=r.provider,
            status=r.status,
            classification=r.classification,
            expected=r.expected_label,
            selected=r.selected_label,
            confidence_score=_r(r.confidence_score),
            reasoning=r.reasoning,
            error_message=r.error_message,
        )
        for r in records
        if r.status in ("completed", "failed") and not r.passed
    ]
    out.sort(key=lambda f: (f.test_case_name, f.model, str(f.run_id)))
    return out[:limit]
