"""Where does int8 rows' error come from: the 7-bit weights or the 8-bit activations?

Loads the embedded SmolLM2-135M in float32 and, for each variant, a copy whose linear
layers round only one half of the ``--transformers-quantization int8`` scheme (in
float32, the other half exact), then reports top-1 agreement, the change of the
held-out negative log-likelihood and the KL divergence against the float32 model,
teacher-forced on three of this repository's documents (768 tokens each)::

    HF_HUB_OFFLINE=1 python benchmarks/int8_error_split.py
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Callable
from pathlib import Path

import flexserv_transformers  # noqa: F401  (OpenMP policy before torch)
import torch
from flexserv_torch.int8 import WEIGHT_MAX, RowInt8Linear
from int8_quality import load_embedded  # this folder is on sys.path when a script runs
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
TEXTS = [("docs/plugins.md", 0), ("README.md", 0), ("docs/benchmarks.md", 5000)]


def _round_input_rows(x: torch.Tensor) -> torch.Tensor:
    """Each row on 256 levels around zero, its largest magnitude at 127.5 steps (as int8 rows do)."""
    scale = x.abs().amax(dim=-1, keepdim=True).clamp(min=1e-30) / 127.5
    return (x / scale).round().clamp(-128, 127) * scale


class SimulatedInt8(nn.Module):
    """A float32 linear layer that rounds its weights, its input rows, or both, as int8 rows do."""

    def __init__(self, linear: nn.Linear, weights: bool, activations: bool, two_pass: bool = False) -> None:
        super().__init__()
        weight = linear.weight.detach().float()
        self.weight = weight
        if weights:
            scale = weight.abs().amax(dim=1, keepdim=True).clamp(min=1e-8) / WEIGHT_MAX
            self.weight = (weight / scale).round().clamp(-WEIGHT_MAX, WEIGHT_MAX) * scale
        self.activations = activations
        self.two_pass = two_pass

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.activations:
            rounded = _round_input_rows(x)
            if self.two_pass:
                rounded = rounded + _round_input_rows(x - rounded)
            x = rounded
        return x @ self.weight.T


def replaced(model: nn.Module, make: Callable[[nn.Linear], nn.Module], keep: Callable[[str], bool]) -> nn.Module:
    copy_ = copy.deepcopy(model)
    for name, module in list(copy_.named_modules()):
        if isinstance(module, nn.Linear) and not keep(name):
            parent, _, child = name.rpartition(".")
            setattr(copy_.get_submodule(parent) if parent else copy_, child, make(module))
    return copy_


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=768)
    parser.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "flexserv"))
    args = parser.parse_args()
    model, tokenizer = load_embedded(torch.float32, Path(args.cache_dir))
    inputs = [
        torch.tensor([tokenizer.encode((ROOT / name).read_text()[start : start + 12000])[: args.tokens]])
        for name, start in TEXTS
    ]
    with torch.inference_mode():
        references = [model(ids).logits[0, :-1].float() for ids in inputs]

    def report(label: str, variant: nn.Module) -> None:
        agreement, nll, kl = [], [], []
        with torch.inference_mode():
            for ids, reference in zip(inputs, references, strict=True):
                got = variant(ids).logits[0, :-1].float()
                target = ids[0, 1:]
                agreement.append((reference.argmax(-1) == got.argmax(-1)).float().mean().item())
                ratio = nn.functional.cross_entropy(got, target) / nn.functional.cross_entropy(reference, target)
                nll.append(100 * (ratio.item() - 1))
                kl.append(
                    nn.functional.kl_div(
                        got.log_softmax(-1), reference.log_softmax(-1), log_target=True, reduction="batchmean"
                    ).item()
                )
        print(
            f"{label:58s} agreement {' '.join(f'{a:.1%}' for a in agreement)}"
            f"  NLL {' '.join(f'{n:+.2f}%' for n in nll)}  KL {' '.join(f'{k:.4f}' for k in kl)}",
            flush=True,
        )

    every = lambda name: False  # noqa: E731
    report("both (the fbgemm layers as shipped)", replaced(model, RowInt8Linear, every))
    report("both, simulated", replaced(model, lambda m: SimulatedInt8(m, True, True), every))
    report(
        "weights only (7 bits, a scale per output row)", replaced(model, lambda m: SimulatedInt8(m, True, False), every)
    )
    report(
        "activations only (8 bits, a scale per input row)",
        replaced(model, lambda m: SimulatedInt8(m, False, True), every),
    )
    report(
        "weights, and activations in two int8 passes",
        replaced(model, lambda m: SimulatedInt8(m, True, True, two_pass=True), every),
    )
    report("all but the output head", replaced(model, lambda m: SimulatedInt8(m, True, True), lambda n: "lm_head" in n))
    report("all but down_proj", replaced(model, lambda m: SimulatedInt8(m, True, True), lambda n: "down_proj" in n))


if __name__ == "__main__":
    main()
