"""The decoder architectures the transformers backend is tested on, and ``docs/models.md``.

Each :class:`Family` names transformers' config and model classes and the tiny
configuration the architecture matrix (``tests/engine/test_architecture_matrix.py``)
builds a seeded checkpoint from (:func:`flexserv_transformers.testing.build_tiny_family`).
``paged`` is what the matrix holds the paged engine to: ``True``, served token for
token like ``model.generate``; ``False``, refused at load with a message that names
the simple engine, which the matrix checks serves it exactly instead.

``docs/models.md`` is rendered from this table (``python -m flexserv_transformers.families``
rewrites it; a test fails when it is stale), so the documented status is the
tested one.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Tokens a windowed layer attends to in the tiny checkpoints: far below the
#: matrix's prompts, so every windowed family is checked past its window.
TINY_WINDOW = 8

_LLAMA_LIKE: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}


@dataclass(frozen=True)
class Family:
    """One architecture of the matrix."""

    name: str
    config_class: str  # in ``transformers``
    model_class: str  # in ``transformers``
    config: dict[str, Any] = field(default_factory=dict)  # the tiny sizes and features
    attention: str = "causal"  # what its attention asks of the engine, for the docs
    paged: bool = True  # served by the paged engine (else refused at load)
    why: str = ""  # why the paged engine refuses it

    @property
    def windowed(self) -> bool:
        return "window" in self.attention


FAMILIES: tuple[Family, ...] = (
    Family("Llama", "LlamaConfig", "LlamaForCausalLM", _LLAMA_LIKE),
    Family(
        "Qwen2",
        "Qwen2Config",
        "Qwen2ForCausalLM",
        {**_LLAMA_LIKE, "use_sliding_window": True, "sliding_window": TINY_WINDOW, "max_window_layers": 1},
        attention="sliding window from layer `max_window_layers` on (`use_sliding_window`)",
    ),
    Family("Qwen3", "Qwen3Config", "Qwen3ForCausalLM", {**_LLAMA_LIKE, "head_dim": 16}, attention="causal, q/k norms"),
    Family(
        "Qwen2-MoE",
        "Qwen2MoeConfig",
        "Qwen2MoeForCausalLM",
        {
            **_LLAMA_LIKE,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 64,
        },
    ),
    Family(
        "Qwen3-MoE",
        "Qwen3MoeConfig",
        "Qwen3MoeForCausalLM",
        {**_LLAMA_LIKE, "head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32},
    ),
    Family(
        "Mixtral",
        "MixtralConfig",
        "MixtralForCausalLM",
        {**_LLAMA_LIKE, "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": None},
    ),
    Family("Gemma", "GemmaConfig", "GemmaForCausalLM", {**_LLAMA_LIKE, "head_dim": 16}),
    Family(
        "Gemma 2",
        "Gemma2Config",
        "Gemma2ForCausalLM",
        {
            **_LLAMA_LIKE,
            "head_dim": 16,
            "query_pre_attn_scalar": 16,
            "sliding_window": TINY_WINDOW,
            "attn_logit_softcapping": 10.0,  # the default 50 never binds on logits this small
        },
        attention="sliding window on alternate layers, attention-logit soft-capping",
    ),
    Family(
        "Gemma 3 (text)",
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        {
            **_LLAMA_LIKE,
            "num_hidden_layers": 6,
            "head_dim": 16,
            "query_pre_attn_scalar": 16,
            "sliding_window": TINY_WINDOW,
        },
        attention="sliding window on 5 layers of 6, q/k norms",
    ),
    Family(
        "Mistral (windowed)",
        "MistralConfig",
        "MistralForCausalLM",
        {**_LLAMA_LIKE, "sliding_window": TINY_WINDOW},
        attention="sliding window on every layer",
    ),
    Family("Phi3", "Phi3Config", "Phi3ForCausalLM", _LLAMA_LIKE),
    Family("OLMo2", "Olmo2Config", "Olmo2ForCausalLM", _LLAMA_LIKE, attention="causal, q/k norms"),
    Family("Granite", "GraniteConfig", "GraniteForCausalLM", {**_LLAMA_LIKE, "attention_multiplier": 0.3}),
    Family(
        "GPT-2",
        "GPT2Config",
        "GPT2LMHeadModel",
        {"n_embd": 64, "n_layer": 2, "n_head": 4},
        attention="causal, learned positions",
    ),
    Family(
        "GPT-NeoX",
        "GPTNeoXConfig",
        "GPTNeoXForCausalLM",
        {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4},
        attention="causal, partial rotary",
    ),
    Family("Cohere", "CohereConfig", "CohereForCausalLM", _LLAMA_LIKE),
    Family("SmolLM3", "SmolLM3Config", "SmolLM3ForCausalLM", _LLAMA_LIKE, attention="causal, no rope on some layers"),
    Family(
        "GPT-OSS",
        "GptOssConfig",
        "GptOssForCausalLM",
        {
            **_LLAMA_LIKE,
            "head_dim": 16,
            "num_local_experts": 4,
            "num_experts_per_tok": 2,
            "sliding_window": TINY_WINDOW,
        },
        attention="sliding window on alternate layers, attention sinks",
    ),
    Family(
        "Falcon",
        "FalconConfig",
        "FalconForCausalLM",
        {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4},
        paged=False,
        why="its attention does not go through transformers' attention interface",
    ),
    Family(
        "StableLM",
        "StableLmConfig",
        "StableLmForCausalLM",
        _LLAMA_LIKE,
        paged=False,
        why="its decoder layers do not pass the engine's arguments on to the attention",
    ),
)


def family(name: str) -> Family:
    """The family called ``name``; ``KeyError`` if there is none."""
    for f in FAMILIES:
        if f.name == name:
            return f
    raise KeyError(name)


DOC_HEADER = """# Supported model architectures

<!-- Generated by `python -m flexserv_transformers.families` from the architecture matrix
(plugins/transformers/flexserv_transformers/families.py); do not edit by hand. -->

The transformers backend serves decoder-only causal LMs. The architectures below are
held to their status by the architecture matrix
(`plugins/transformers/tests/engine/test_architecture_matrix.py`): a tiny seeded
checkpoint of each, built from transformers' config class, is served through the
engine and compared token for token with `model.generate(do_sample=False)`, in
float32 (exactly) and bfloat16 (up to ties), one prompt at a time and several
together, with prompts and completions well past any sliding window, chunked
prefill and prefix-cache hits included.

- **paged, exact**: the default paged engine (`--transformers-engine paged`) serves it.
- **simple engine only**: the paged engine refuses it at load with a message saying
  why; `--transformers-engine simple` serves it exactly.

An architecture not listed may work: the paged engine checks at load that every
attention layer goes through its attention function and asks for nothing it does
not implement, and refuses the model otherwise.

A model with a sliding window on **every** layer (Mistral v0.1; Qwen2 when
`max_window_layers` is 0) has the KV blocks that fall out of its window given back
while a sequence runs, so its whole context is served from a pool that holds one
window and `/v1/models` reports that context as `max_model_len`; models with a
global layer keep every block (see the transformers plugin's README).

| Architecture | transformers classes | Attention | Paged engine | Simple engine |
|---|---|---|---|---|
"""


def render_doc() -> str:
    """``docs/models.md`` as the matrix defines it."""
    rows = []
    for f in FAMILIES:
        paged = "exact" if f.paged else f"refused at load: {f.why}"
        rows.append(f"| {f.name} | `{f.config_class}`, `{f.model_class}` | {f.attention} | {paged} | exact |")
    return DOC_HEADER + "\n".join(rows) + "\n"


def doc_path() -> Path:
    """``docs/models.md`` of the source tree this module lives in."""
    return Path(__file__).resolve().parents[3] / "docs" / "models.md"


def main(argv: list[str] | None = None) -> int:
    """Rewrite ``docs/models.md`` (``--check``: exit 1 when it is stale instead)."""
    args = sys.argv[1:] if argv is None else argv
    path = doc_path()
    text = render_doc()
    if "--check" in args:
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if current != text:
            print(f"{path.name} is stale: run python -m flexserv_transformers.families", file=sys.stderr)
            return 1
        return 0
    path.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
