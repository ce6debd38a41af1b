"""Pure statistics of ``flexserv bench``: percentiles and the per-level summary."""

from __future__ import annotations

import random

import numpy as np
import pytest
from flexserv_bench.client import RequestResult
from flexserv_bench.stats import latency, percentile, summarise


def test_percentile_known_values() -> None:
    values = [float(v) for v in range(1, 11)]  # 1..10
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 10.0
    assert percentile(values, 50) == pytest.approx(5.5)
    assert percentile(values, 95) == pytest.approx(9.55)
    assert percentile(list(reversed(values)), 25) == pytest.approx(3.25)  # order of input does not matter
    assert percentile([7.0], 99) == 7.0
    assert percentile([], 50) is None


def test_percentile_matches_numpy_linear() -> None:
    rng = random.Random(4)
    for size in (2, 3, 17, 200):
        values = [rng.expovariate(3.0) for _ in range(size)]
        for q in (1, 50, 90, 95, 99):
            assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


@pytest.mark.parametrize("q", [-1, 100.5])
def test_percentile_rejects_out_of_range(q: float) -> None:
    with pytest.raises(ValueError, match=r"0\.\.100"):
        percentile([1.0], q)


def test_latency_is_ordered() -> None:
    stat = latency([0.3, 0.1, 0.2, 5.0, 0.15])
    assert stat.p50 is not None and stat.p95 is not None and stat.p99 is not None and stat.max is not None
    assert stat.p50 <= stat.p95 <= stat.p99 <= stat.max == 5.0
    assert stat.mean == pytest.approx(1.15)


def _ok(ttft: float, e2e: float, tokens: int) -> RequestResult:
    gap = (e2e - ttft) / (tokens - 1)
    return RequestResult(started=0.0, ttft=ttft, e2e=e2e, itls=[gap] * (tokens - 1), output_tokens=tokens)


def test_summarise_counts_tokens_errors_and_rates() -> None:
    results = [
        _ok(0.1, 1.1, 11),
        _ok(0.2, 2.2, 11),
        RequestResult(started=0.0, status=404, error_kind="http_404", error_message="model 'x' not found"),
        RequestResult(started=0.0, status=404, error_kind="http_404", error_message="model 'x' not found"),
        RequestResult(started=0.0, error_kind="timeout", error_message="no answer"),
    ]
    level = summarise(4, results, duration_s=2.0)
    assert (level.concurrency, level.requests, level.completed, level.errors) == (4, 5, 2, 3)
    assert level.output_tokens == 22
    assert level.output_tokens_per_s == pytest.approx(11.0)
    assert level.requests_per_s == pytest.approx(1.0)
    assert level.ttft_s.p50 == pytest.approx(0.15)
    assert level.e2e_s.max == pytest.approx(2.2)
    assert level.itl_s.p50 == pytest.approx(0.15)  # ten gaps of 0.1 and ten of 0.2
    # 10 tokens after the first in 1.0 s and in 2.0 s: 10 and 5 tok/s.
    assert level.per_request_tokens_per_s == pytest.approx(7.5)
    assert level.error_kinds == {"http_404": 2, "timeout": 1}
    assert [(s.kind, s.count) for s in level.error_samples] == [("http_404", 2), ("timeout", 1)]
    assert "not found" in level.error_samples[0].message


def test_summarise_all_failed_has_no_latencies() -> None:
    level = summarise(1, [RequestResult(started=0.0, error_kind="connect", error_message="refused")], 0.5)
    assert level.completed == 0 and level.output_tokens_per_s == 0.0
    assert level.ttft_s.p50 is None and level.itl_s.p95 is None and level.per_request_tokens_per_s is None
