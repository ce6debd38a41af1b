"""c=20 with every request constrained by a JSON schema against the same load
unconstrained, interleaved A/B/B/A against one in-process server with the
embedded SmolLM2, with the engine's step split into forward pass, sampling, mask
application and grammar advance (timers wrapped around the engine's functions).

    python benchmarks/constrained_ab.py --rounds 2

Both sides send ``logit_bias`` -100 on SmolLM2's two end tokens, so unconstrained
requests also run to ``max_tokens`` and both sides generate the same number of
tokens; the schema asks for at least 40 words, so it never completes within 64
tokens either. Prints one JSON line per run (load average at its start, aggregate
tok/s, per-step milliseconds).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

SCHEMA = {
    "response_format": {
        "type": "json_schema",
        "json_schema": {
            "name": "words",
            "schema": {
                "type": "object",
                "properties": {
                    "words": {"type": "array", "items": {"type": "string", "maxLength": 12}, "minItems": 40}
                },
                "required": ["words"],
                "additionalProperties": False,
            },
        },
    }
}
NO_EOS = {"logit_bias": {"0": -100, "2": -100}}  # SmolLM2's <|endoftext|> and <|im_end|>
PHASES = ("step", "forward", "sample", "mask", "advance")

totals: dict[str, float] = defaultdict(float)
counts: dict[str, int] = defaultdict(int)


def _timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            totals[name] += time.perf_counter() - start
            counts[name] += 1

    return wrapper


def _instrument() -> None:
    import flexserv_constraints.matcher as matcher
    import flexserv_transformers.sampling as sampling
    from flexserv_transformers.engine import engine, runner

    sampling.apply_blocked_masks = _timed("mask", sampling.apply_blocked_masks)  # type: ignore[assignment]
    engine.sample_next = _timed("sample", engine.sample_next)  # type: ignore[assignment]
    runner.ModelRunner.forward = _timed("forward", runner.ModelRunner.forward)  # type: ignore[method-assign]
    engine.PagedEngine._step = _timed("step", engine.PagedEngine._step)  # type: ignore[method-assign]
    matcher.LLTokenMatcher.advance = _timed("advance", matcher.LLTokenMatcher.advance)  # type: ignore[method-assign]


def _bench(url: str, extra: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    command = [sys.executable, "-m", "flexserv_core", "bench", "--url", url, "--model", args.model]
    command += ["--concurrency", str(args.concurrency), "--requests", str(args.requests)]
    command += ["--max-tokens", str(args.max_tokens), "--quiet", "--json", "--extra-body", json.dumps(extra)]
    out = subprocess.run(command, capture_output=True, text=True, check=True)
    level: dict[str, Any] = json.loads(out.stdout)["levels"][0]
    return level


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--model", default="SmolLM2-135M-Instruct")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    _instrument()
    from flexserv_core.testing import ServedApp, make_app

    with ServedApp(make_app(["transformers", "constraints"]), start_timeout=300) as url:
        for round_ in range(1, args.rounds + 1):
            # ABBA: odd rounds start unconstrained, even rounds constrained, so a drift
            # of the machine's load over a round does not favour one side
            for kind in ("free", "schema") if round_ % 2 else ("schema", "free"):
                totals.clear()
                counts.clear()
                load = os.getloadavg()[0]
                level = _bench(url, {**NO_EOS, **(SCHEMA if kind == "schema" else {})}, args)
                steps = max(counts["step"], 1)
                row = {
                    "round": round_,
                    "kind": kind,
                    "load": round(load, 2),
                    "tok_s": round(level["output_tokens_per_s"], 1),
                    "tokens": level["output_tokens"],
                    "errors": level["errors"],
                    "steps": counts["step"],
                    **{f"{p}_ms": round(1000 * totals[p] / steps, 2) for p in PHASES},
                }
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
