"""A Llama checkpoint's ``config.json`` read without transformers, and the test of
whether FlexServ's own forward computes that model exactly."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: transformers' default ``rope_theta`` when a config names none.
_DEFAULT_ROPE_THETA = 10_000.0


@dataclass(frozen=True, slots=True)
class LlamaConfig:
    """The fields of a Llama ``config.json`` the forward and the engine read.

    Attribute names are transformers' so code written against its configs
    (``kv_geometry``, ``context_length``) reads this one unchanged."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    max_position_embeddings: int
    rms_norm_eps: float
    rope_theta: float
    tie_word_embeddings: bool
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    pad_token_id: int | None = None
    model_type: str = "llama"
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    def get_text_config(self) -> LlamaConfig:
        """Itself (a text-only config), as transformers' configs answer."""
        return self

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> LlamaConfig:
        heads = int(raw["num_attention_heads"])
        hidden = int(raw["hidden_size"])
        return cls(
            vocab_size=int(raw.get("vocab_size", 32000)),
            hidden_size=hidden,
            intermediate_size=int(raw["intermediate_size"]),
            num_hidden_layers=int(raw["num_hidden_layers"]),
            num_attention_heads=heads,
            num_key_value_heads=int(raw.get("num_key_value_heads") or heads),
            head_dim=int(raw.get("head_dim") or hidden // heads),
            max_position_embeddings=int(raw.get("max_position_embeddings", 2048)),
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
            rope_theta=float(_rope(raw).get("rope_theta", raw.get("rope_theta", _DEFAULT_ROPE_THETA))),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
            bos_token_id=raw.get("bos_token_id", 1),
            eos_token_id=raw.get("eos_token_id", 2),
            pad_token_id=raw.get("pad_token_id"),
            model_type=str(raw.get("model_type", "")),
            raw=raw,
        )


def _rope(raw: dict[str, Any]) -> dict[str, Any]:
    """The rotary parameters, wherever the config's version keeps them."""
    for key in ("rope_parameters", "rope_scaling"):
        value = raw.get(key)
        if isinstance(value, dict):
            return value
    return {}


def read_config(directory: str | Path) -> dict[str, Any]:
    """``config.json`` of a checkpoint directory as a dict (``{}`` when unreadable)."""
    try:
        data = json.loads((Path(directory) / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def unsupported_reason(raw: dict[str, Any]) -> str | None:
    """Why FlexServ's Llama forward would not compute this checkpoint exactly, or
    ``None`` when it does (a plain Llama: default rotary embedding, SiLU, no biases)."""
    if not raw:
        return "its config.json could not be read"
    if raw.get("model_type") != "llama":
        return f"model_type is {raw.get('model_type')!r}, not 'llama'"
    if raw.get("architectures", ["LlamaForCausalLM"]) != ["LlamaForCausalLM"]:
        return f"the architecture is {raw.get('architectures')!r}, not LlamaForCausalLM"
    if raw.get("hidden_act", "silu") != "silu":
        return f"hidden_act is {raw.get('hidden_act')!r}, not silu"
    if raw.get("attention_bias") or raw.get("mlp_bias"):
        return "it has attention or MLP biases"
    rope = _rope(raw)
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type != "default":
        return f"its rotary embedding is {rope_type!r} (only the default one is implemented)"
    if "partial_rotary_factor" in rope or "partial_rotary_factor" in raw:
        return "it rotates part of each head (partial_rotary_factor)"
    if raw.get("quantization_config"):
        return "it is a quantized checkpoint (quantization_config)"
    if raw.get("auto_map"):
        return "it ships its own model code (auto_map)"
    return None
