"""Does FlexServ's memory grow with traffic? RSS after a warm-up vs after N more requests.

Starts ``flexserv run`` (the embedded model unless ``--flexserv-args`` says
otherwise), sends a warm-up batch through ``flexserv bench``, reads the server's
RSS, sends ``--requests`` more at ``--concurrency`` and reads it again::

    HF_HUB_OFFLINE=1 python benchmarks/rss_soak.py --requests 1000 --concurrency 20 --max-tokens 8
    HF_HUB_OFFLINE=1 python benchmarks/rss_soak.py --warmup 1 --requests 2000 --unique-prompts

``--settle S`` reads RSS once more after ``S`` idle seconds: the engine hands freed
heap pages back when it goes idle (at most every 10 s), so the difference is memory
kept but free, not memory in use.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_peers import RssSampler, free_port, stop, wait_ready


def rss(proc: subprocess.Popen[bytes]) -> int:
    root = psutil.Process(proc.pid)
    return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])


def load(url: str, args: argparse.Namespace, requests: int) -> dict:
    command = [sys.executable, "-m", "flexserv_core", "bench", "--url", url, "--model", args.model, "--json", "--quiet"]
    command += [
        "--concurrency",
        str(min(args.concurrency, requests)),
        "--requests",
        str(requests),
        "--max-tokens",
        str(args.max_tokens),
    ]
    command += ["--shared-prefix-tokens", str(args.shared_prefix_tokens), "--warmup", "0"]
    if args.dataset:
        command += ["--dataset", args.dataset]
    out = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["levels"][0]


def engine_metrics(url: str) -> dict[str, float]:
    """The prefix-cache counters and KV gauges of ``/metrics`` (summed over models)."""
    wanted = {
        "flexserv:prefix_cache_queries_total": "prefix_queries",
        "flexserv:prefix_cache_hits_total": "prefix_hits",
        "flexserv:kv_cache_usage_perc": "kv_usage",
        "flexserv:kv_cache_resident_perc": "kv_resident",
    }
    found: dict[str, float] = {}
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in wanted:
            value = (line.split("}", 1)[1] if "}" in line else line[len(name) :]).split()[0]
            found[wanted[name]] = found.get(wanted[name], 0.0) + float(value)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--shared-prefix-tokens", type=int, default=300)
    parser.add_argument("--model", default="SmolLM2-135M-Instruct")
    parser.add_argument("--flexserv-args", default="")
    parser.add_argument(
        "--unique-prompts",
        action="store_true",
        help="Give every request its own user prompt (the default cycles 50), so the prefix cache keeps filling.",
    )
    parser.add_argument("--settle", type=float, default=0.0, help="Read RSS again after this many idle seconds.")
    args = parser.parse_args()
    args.dataset = None
    if args.unique_prompts:
        import random
        import tempfile

        rng = random.Random(0)
        words = [
            "time",
            "person",
            "year",
            "way",
            "day",
            "thing",
            "man",
            "world",
            "life",
            "hand",
            "part",
            "child",
            "eye",
            "woman",
            "place",
            "work",
            "week",
            "case",
        ]
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            for i in range(args.warmup + args.requests):
                text = " ".join(rng.choice(words) for _ in range(24))
                f.write(json.dumps({"prompt": f"Request {i}: summarise {text}"}) + "\n")
        args.dataset = f.name

    port = free_port()
    command = [sys.executable, "-m", "flexserv_core", "run", "--port", str(port), *shlex.split(args.flexserv_args)]
    env = {**os.environ, "FLEXSERV_PLUGINS": "transformers"}  # the text server alone, as compare_peers runs it
    proc = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env
    )
    url = f"http://127.0.0.1:{port}"
    sampler = RssSampler(proc.pid)
    sampler.start()
    try:
        wait_ready(url, proc, timeout=300)
        warm = load(url, args, args.warmup)
        before = rss(proc)
        sampler.phase = "soak"
        soak = load(url, args, args.requests)
        after = rss(proc)
        metrics = engine_metrics(url)
        if args.settle:
            time.sleep(args.settle)
        settled = rss(proc)
    finally:
        sampler.stopped.set()
        stop(proc)
    result = {
        "warmup_requests": args.warmup,
        "soak_requests": args.requests,
        "errors": warm.get("errors", 0) + soak.get("errors", 0),
        "rss_after_warmup_gib": round(before / 2**30, 3),
        "rss_after_soak_gib": round(after / 2**30, 3),
        "growth": round(after / before, 4),
        **(
            {"rss_settled_gib": round(settled / 2**30, 3), "growth_settled": round(settled / before, 4)}
            if args.settle
            else {}
        ),
        "peak_rss_during_soak_gib": round(sampler.peaks.get("soak", 0) / 2**30, 3),
        "unique_prompts": args.unique_prompts,
        "soak_output_tok_s": soak.get("output_tokens_per_s"),
        "prefix_hit_rate": round(metrics["prefix_hits"] / metrics["prefix_queries"], 4)
        if metrics.get("prefix_queries")
        else None,
        "kv_resident_fraction": metrics.get("kv_resident"),
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
