"""The bench report: a msgspec Struct (the ``--json`` schema) and its text form."""

from __future__ import annotations

import msgspec

from flexserv_bench.stats import Latency, LevelSummary

#: Bumped when a field of :class:`BenchReport` changes meaning or goes away.
SCHEMA_VERSION = 1


class BenchConfig(msgspec.Struct, frozen=True):
    url: str
    model: str
    endpoint: str
    max_tokens: int
    temperature: float
    shared_prefix_tokens: int
    dataset: str
    prompts: int
    requests_per_level: int
    concurrency: list[int]
    timeout_s: float
    token_count: str  # "usage" (server's usage, else text chunks) or "tokenizer:<name>"


class BenchReport(msgspec.Struct, frozen=True):
    schema_version: int
    config: BenchConfig
    levels: list[LevelSummary]


def to_json(report: BenchReport) -> bytes:
    return msgspec.json.format(msgspec.json.encode(report), indent=2)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.0f}"


def _row(cells: list[str], widths: list[int]) -> str:
    return "  ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True))


HEADERS = [
    "conc",
    "reqs",
    "ok",
    "err",
    "tok/s",
    "req/s",
    "TTFT p50",
    "p95",
    "p99",
    "ITL p50",
    "p95",
    "E2E p50",
    "p95",
]


def _cells(level: LevelSummary) -> list[str]:
    def lat(stat: Latency, *names: str) -> list[str]:
        return [_ms(getattr(stat, n)) for n in names]

    return [
        str(level.concurrency),
        str(level.requests),
        str(level.completed),
        str(level.errors),
        f"{level.output_tokens_per_s:.1f}",
        f"{level.requests_per_s:.2f}",
        *lat(level.ttft_s, "p50", "p95", "p99"),
        *lat(level.itl_s, "p50", "p95"),
        *lat(level.e2e_s, "p50", "p95"),
    ]


def to_text(report: BenchReport) -> str:
    """A fixed-width table (latencies in ms), then the errors by kind."""
    c = report.config
    lines = [
        f"{c.url}  model={c.model}  endpoint={c.endpoint}  max_tokens={c.max_tokens}  "
        f"temperature={c.temperature:g}  shared_prefix_tokens={c.shared_prefix_tokens}",
        f"dataset={c.dataset} ({c.prompts} prompts)  requests/level={c.requests_per_level}  tokens={c.token_count}",
        "",
    ]
    rows = [HEADERS, *(_cells(level) for level in report.levels)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADERS))]
    lines += [_row(r, widths) for r in rows]
    lines.append("(latencies in ms; tok/s and req/s are aggregate over the level's wall time)")
    for level in report.levels:
        for sample in level.error_samples:
            lines.append(f"c={level.concurrency} {sample.kind} x{sample.count}: {sample.message}")
    return "\n".join(lines)
