"""Markdown table of ``benchmarks/ray_replicas.sh``'s ``flexserv bench --json`` reports.

Usage: python benchmarks/ray_replicas_report.py OUT_DIR
Rows: one per report and concurrency level (``plain-ray1-r1`` is the plain server
measured next to ``ray1-r1``), then the median over rounds per configuration.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

HEADER = (
    "| run | conc | ok/err | out tok/s | TTFT p50 | TTFT p95 | E2E p50 | E2E p95 | ITL p50 |\n"
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
)


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.0f} ms"


def row(name: str, level: dict[str, Any]) -> str:
    return (
        f"| {name} | {level['concurrency']} | {level['completed']}/{level['errors']} "
        f"| {level['output_tokens_per_s']:.1f} | {ms(level['ttft_s']['p50'])} | {ms(level['ttft_s']['p95'])} "
        f"| {ms(level['e2e_s']['p50'])} | {ms(level['e2e_s']['p95'])} | {ms(level['itl_s']['p50'])} |"
    )


def eval_ratio(value: str) -> float:
    """``"123/100"`` (clock ticks / ticks per second) -> 1.23."""
    ticks, per_second = value.split("/")
    return int(ticks) / int(per_second)


def config_of(name: str) -> str:
    """``plain-ray1-r2`` -> ``plain (beside ray1)``; ``ray1-r2`` -> ``ray1``."""
    base = name.rsplit("-r", 1)[0]
    return f"plain (beside {base.split('-', 1)[1]})" if base.startswith("plain-") else base


def print_cpu(out: Path, lines: list[str]) -> None:
    """CPU per output token of Ray's proxy and replicas, net of their idle CPU over the same time."""
    runs = {
        label: {k: eval_ratio(v) for k, v in (f.split("=") for f in fields)} for label, *fields in map(str.split, lines)
    }
    print("\nCPU of Ray's proxy and replicas per output token, net of their idle CPU (warm-up requests included):\n")
    print(
        "| run | wall | proxy CPU | idle proxy CPU | replicas CPU | idle replicas CPU | tokens | proxy ms/token | replicas ms/token |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, cpu in runs.items():
        report_path = out / f"{label}.json"
        if label.endswith("-idle") or not report_path.exists():
            continue
        try:
            tokens = sum(lv["output_tokens"] for lv in json.loads(report_path.read_text())["levels"])
        except ValueError:
            continue
        idle = runs.get(label.rsplit("-r", 1)[0] + "-idle")
        share = cpu["wall_s"] / idle["wall_s"] if idle else 0.0
        idle_proxy = idle["proxy_cpu_s"] * share if idle else 0.0
        idle_replicas = idle["replicas_cpu_s"] * share if idle else 0.0
        proxy, replicas = cpu["proxy_cpu_s"] - idle_proxy, cpu["replicas_cpu_s"] - idle_replicas
        print(
            f"| {label} | {cpu['wall_s']:.0f} s | {cpu['proxy_cpu_s']:.2f} s | {idle_proxy:.2f} s "
            f"| {cpu['replicas_cpu_s']:.2f} s | {idle_replicas:.2f} s | {tokens} "
            f"| {proxy * 1000 / tokens:.2f} | {replicas * 1000 / tokens:.2f} |"
        )


def main(out: Path) -> None:
    runs = sorted(out.glob("*.json"))
    print(HEADER)
    grouped: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for path in runs:
        try:
            report = json.loads(path.read_text())
        except ValueError:
            print(f"| {path.stem} | (no report: the run failed or timed out) |||||||")
            continue
        for level in report["levels"]:
            print(row(path.stem, level))
            grouped[config_of(path.stem), level["concurrency"]].append(level)
    print("\nMedian over rounds:\n")
    print(HEADER)
    for (config, conc), levels in sorted(grouped.items()):

        def med(*keys: str, levels: list[dict[str, Any]] = levels) -> float | None:
            values = []
            for level in levels:
                value: Any = level
                for key in keys:
                    value = value[key]
                if value is not None:
                    values.append(value)
            return statistics.median(values) if values else None

        merged = {
            "concurrency": conc,
            "completed": sum(lv["completed"] for lv in levels),
            "errors": sum(lv["errors"] for lv in levels),
            "output_tokens_per_s": med("output_tokens_per_s"),
            "ttft_s": {"p50": med("ttft_s", "p50"), "p95": med("ttft_s", "p95")},
            "e2e_s": {"p50": med("e2e_s", "p50"), "p95": med("e2e_s", "p95")},
            "itl_s": {"p50": med("itl_s", "p50")},
        }
        print(row(config, merged))
    cpu = out / "cpu.txt"
    if cpu.exists():
        print_cpu(out, cpu.read_text().splitlines())
    loadavg = out / "loadavg.txt"
    if loadavg.exists():
        print("\nLoad average (1, 5, 15 min) after each run:\n")
        for line in loadavg.read_text().splitlines():
            print(f"    {line}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
