"""Pure statistics: percentiles and the summary of one concurrency level."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import msgspec

from flexserv_bench.client import RequestResult


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) with linear interpolation between the
    closest ranks (numpy's default method); None for no values."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0..100, not {q}")
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


class Latency(msgspec.Struct, frozen=True):
    """Seconds; None where there was nothing to measure."""

    p50: float | None
    p95: float | None
    p99: float | None
    mean: float | None
    max: float | None


def latency(values: Sequence[float]) -> Latency:
    return Latency(
        p50=percentile(values, 50),
        p95=percentile(values, 95),
        p99=percentile(values, 99),
        mean=sum(values) / len(values) if values else None,
        max=max(values) if values else None,
    )


class ErrorSample(msgspec.Struct, frozen=True):
    kind: str
    count: int
    message: str


class LevelSummary(msgspec.Struct, frozen=True):
    """One concurrency level. Throughputs divide by ``duration_s``: from the first
    request's start to the last one's end."""

    concurrency: int
    requests: int
    completed: int
    errors: int
    duration_s: float
    output_tokens: int
    output_tokens_per_s: float
    requests_per_s: float
    ttft_s: Latency
    itl_s: Latency
    e2e_s: Latency
    #: Mean over successful requests of tokens after the first / time after the first token.
    per_request_tokens_per_s: float | None
    error_kinds: dict[str, int]
    error_samples: list[ErrorSample]


def summarise(concurrency: int, results: Sequence[RequestResult], duration_s: float) -> LevelSummary:
    ok = [r for r in results if r.ok]
    failed = [r for r in results if not r.ok]
    tokens = sum(r.output_tokens for r in ok)
    itls = [gap for r in ok for gap in r.itls]
    decode_rates = [
        (r.output_tokens - 1) / (r.e2e - r.ttft)
        for r in ok
        if r.e2e is not None and r.ttft is not None and r.output_tokens > 1 and r.e2e > r.ttft
    ]
    kinds = Counter(r.error_kind for r in failed if r.error_kind)
    samples: dict[str, str] = {}
    for r in failed:
        if r.error_kind and r.error_kind not in samples:
            samples[r.error_kind] = r.error_message or ""
    safe = duration_s if duration_s > 0 else math.inf
    return LevelSummary(
        concurrency=concurrency,
        requests=len(results),
        completed=len(ok),
        errors=len(failed),
        duration_s=duration_s,
        output_tokens=tokens,
        output_tokens_per_s=tokens / safe,
        requests_per_s=len(ok) / safe,
        ttft_s=latency([r.ttft for r in ok if r.ttft is not None]),
        itl_s=latency(itls),
        e2e_s=latency([r.e2e for r in ok if r.e2e is not None]),
        per_request_tokens_per_s=sum(decode_rates) / len(decode_rates) if decode_rates else None,
        error_kinds=dict(sorted(kinds.items())),
        error_samples=[ErrorSample(kind=k, count=kinds[k], message=m) for k, m in sorted(samples.items())],
    )
