"""``flexserv bench``: arguments, the run over concurrency levels, the output.

Exit status: 0 when at least one measured request succeeded, 1 when every one
failed (the report still says why), 2 for a usage error (bad flag value,
unreadable or malformed dataset, tokenizer that cannot load, no model to name).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import httpx

from flexserv_bench.client import RequestSpec
from flexserv_bench.dataset import BUILTIN_DATASET, DatasetError, load_prompts, shared_prefix
from flexserv_bench.loadgen import MAX_CONCURRENCY, MAX_REQUESTS, run_level
from flexserv_bench.report import SCHEMA_VERSION, BenchConfig, BenchReport, to_json, to_text
from flexserv_bench.stats import summarise

EXIT_ALL_FAILED = 1
EXIT_USAGE = 2


class BenchUsageError(Exception):
    """A problem with what the user asked for, reported with exit status 2."""


def concurrency_list(value: str) -> list[int]:
    """``"1,4,20"`` -> ``[1, 4, 20]`` (argparse type)."""
    try:
        levels = [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers separated by commas, got {value!r}") from None
    if not levels or any(not 1 <= c <= MAX_CONCURRENCY for c in levels):
        raise argparse.ArgumentTypeError(f"each concurrency must be within 1..{MAX_CONCURRENCY}, got {value!r}")
    return levels


def _bounded_int(low: int, high: int) -> Callable[[str], int]:
    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {value!r}") from None
        if not low <= number <= high:
            raise argparse.ArgumentTypeError(f"must be within {low}..{high}, got {number}")
        return number

    return parse


def _positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {value!r}") from None
    if not number > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return number


def _json_object(value: str) -> dict[str, Any]:
    try:
        data = json.loads(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise argparse.ArgumentTypeError("expected a JSON object")
    return data


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="Server base URL (default: %(default)s).")
    parser.add_argument("--model", help="Model name to request (default: the first of GET /v1/models).")
    parser.add_argument(
        "--concurrency",
        type=concurrency_list,
        default=[1],
        metavar="N[,N...]",
        help="Concurrent clients; a comma list runs each level in turn (default: 1).",
    )
    parser.add_argument(
        "--requests",
        type=_bounded_int(1, MAX_REQUESTS),
        default=20,
        metavar="N",
        help="Requests per level (default: 20).",
    )
    parser.add_argument(
        "--max-tokens",
        type=_bounded_int(1, 1_000_000),
        default=64,
        metavar="N",
        help="max_tokens per request (default: 64).",
    )
    parser.add_argument(
        "--shared-prefix-tokens",
        type=_bounded_int(0, 1_000_000),
        default=0,
        metavar="N",
        help="Prepend a deterministic system prompt of about N tokens, the same for every request (default: 0).",
    )
    parser.add_argument(
        "--dataset",
        metavar="FILE",
        help=f"JSONL of prompts: objects with 'prompt', or JSON strings (default: built-in {BUILTIN_DATASET}).",
    )
    parser.add_argument("--endpoint", choices=("chat", "completions"), default="chat", help="API to load.")
    parser.add_argument(
        "--temperature", type=float, default=0.0, metavar="T", help="Sampling temperature (default: 0, greedy)."
    )
    parser.add_argument(
        "--timeout",
        type=_positive_float,
        default=300.0,
        metavar="SECONDS",
        help="Seconds one request may take (default: 300).",
    )
    parser.add_argument(
        "--api-key",
        default=os.environ.get("FLEXSERV_API_KEY"),
        metavar="KEY",
        help="Bearer token [env FLEXSERV_API_KEY].",
    )
    parser.add_argument(
        "--warmup",
        type=_bounded_int(0, 1000),
        default=1,
        metavar="N",
        help="Unmeasured requests sent first, one at a time, so that model loading is not measured (default: 1).",
    )
    parser.add_argument(
        "--tokenizer",
        metavar="DIR",
        help="Count output tokens by re-tokenising the streamed text with this local transformers tokenizer "
        "(a directory), instead of trusting the server's usage.",
    )
    parser.add_argument(
        "--extra-body",
        type=_json_object,
        default={},
        metavar="JSON",
        help="Extra fields for every request body, e.g. '{\"repeat_penalty\": 1.0}' (cannot override the bench's own).",
    )
    parser.add_argument(
        "--responses",
        metavar="FILE",
        help="Also write every measured request as a JSONL line (level, index, prompt, text, tokens, error).",
    )
    parser.add_argument("--json", action="store_true", help="Print the report as JSON on stdout.")
    parser.add_argument("--quiet", action="store_true", help="No progress line on stderr.")


def _tokenizer_counter(name: str) -> Callable[[str], int]:
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(name, local_files_only=True)
    except Exception as exc:
        raise BenchUsageError(f"cannot load tokenizer {name!r}: {exc}") from exc

    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    return count


async def _first_model(url: str, api_key: str | None, timeout: float) -> str:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=timeout, trust_env=False) as client:
            response = await client.get("/v1/models")
            response.raise_for_status()
            return str(response.json()["data"][0]["id"])
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise BenchUsageError(f"no --model given and GET {url}/v1/models named none: {exc}") from exc


async def bench(args: argparse.Namespace, progress: TextIO | None) -> BenchReport:
    try:
        prompts = load_prompts(args.dataset)
    except DatasetError as exc:
        raise BenchUsageError(str(exc)) from exc
    count_tokens = _tokenizer_counter(args.tokenizer) if args.tokenizer else None
    url = args.url.rstrip("/")
    model = args.model or await _first_model(url, args.api_key, min(args.timeout, 30.0))
    spec = RequestSpec(
        model=model,
        endpoint=args.endpoint,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        system_prompt=shared_prefix(args.shared_prefix_tokens),
        timeout=args.timeout,
        extra_body=args.extra_body,
    )
    common = {"api_key": args.api_key, "progress_stream": None, "count_tokens": count_tokens}
    for i in range(args.warmup):
        await run_level(url, spec, [prompts[i % len(prompts)]], concurrency=1, requests=1, **common)
    levels = []
    records: list[dict[str, Any]] = []
    for concurrency in args.concurrency:
        results, duration = await run_level(
            url,
            spec,
            prompts,
            concurrency=concurrency,
            requests=args.requests,
            **{**common, "progress_stream": progress},
        )
        levels.append(summarise(concurrency, results, duration))
        records += [
            {
                "concurrency": concurrency,
                "index": i,
                "prompt": prompts[i % len(prompts)],
                "text": r.text,
                "output_tokens": r.output_tokens,
                "ttft_s": r.ttft,
                "e2e_s": r.e2e,
                "error": None if r.ok else f"{r.error_kind}: {r.error_message}",
            }
            for i, r in enumerate(results)
        ]
    if args.responses:
        _write_jsonl(Path(args.responses), records)
    config = BenchConfig(
        url=url,
        model=model,
        endpoint=args.endpoint,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        shared_prefix_tokens=args.shared_prefix_tokens,
        dataset=args.dataset or f"built-in:{BUILTIN_DATASET}",
        prompts=len(prompts),
        requests_per_level=args.requests,
        concurrency=list(args.concurrency),
        timeout_s=args.timeout,
        token_count=f"tokenizer:{args.tokenizer}" if args.tokenizer else "usage",
    )
    return BenchReport(schema_version=SCHEMA_VERSION, config=config, levels=levels)


def _write_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    try:
        path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    except OSError as exc:
        raise BenchUsageError(f"cannot write {path}: {exc}") from exc


def run(args: argparse.Namespace) -> int:
    progress = None if args.quiet else sys.stderr
    try:
        report = asyncio.run(bench(args, progress))
    except BenchUsageError as exc:
        print(f"flexserv bench: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("\nflexserv bench: interrupted", file=sys.stderr)
        return 130
    if args.json:
        sys.stdout.write(to_json(report).decode() + "\n")
    else:
        print(to_text(report))
    return 0 if any(level.completed for level in report.levels) else EXIT_ALL_FAILED


def main(argv: list[str] | None = None) -> int:
    """``flexserv bench ARGS`` without the ``flexserv`` command line (``python -m flexserv_bench``)."""
    parser = argparse.ArgumentParser(prog="flexserv bench", description="Load-test an OpenAI-compatible server.")
    add_arguments(parser)
    return run(parser.parse_args(argv))
