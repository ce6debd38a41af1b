"""A Llama-family causal LM forward over the paged engine's attention, torch only.

It computes the operations of transformers' ``LlamaForCausalLM`` (5.x) in the same
dtypes and order: RMSNorm in float32 then cast back, rotary cos/sin in float32
cast to the activations' dtype, the same tensor shapes and views around the
attention call (SDPA's result can depend on strides), the residual adds as there.
So with its projections unfused its logits are bit-identical to transformers' for
the same weights, in float32 and in bfloat16; fused (the 16-bit default) they were
bit-identical on an AVX512-BF16 CPU, and ``tests/test_native_llama.py`` holds them
to rounding, since another CPU's kernels may round a wider matmul differently.

Module and parameter names are transformers' (``model.layers.N.self_attn.q_proj``),
so a checkpoint's state dict loads as is, except that in 16-bit dtypes q/k/v and
gate/up are fused into ``qkv_proj`` and ``gate_up_proj`` (the loader concatenates
the checkpoint's weights; see :class:`Attention`). Every projection is an
``nn.Linear``, so ``quantize_linears`` (int8, one scale per output row) gives the
same rows as on separate layers. It runs only inside the paged engine: every forward
needs the step's :class:`~flexserv_transformers.engine.kv_cache.StepLayout`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from flexserv_transformers.engine.kv_cache import StepLayout, paged_attention_forward
from flexserv_transformers.native.config import LlamaConfig


@dataclass(slots=True)
class GenerationDefaults:
    """What the engine reads of a ``generation_config.json``."""

    eos_token_id: int | list[int] | None = None
    bos_token_id: int | None = None
    pad_token_id: int | None = None


@dataclass(slots=True)
class CausalLMOutput:
    logits: torch.Tensor


class Linear(nn.Linear):
    """``nn.Linear`` without the random init: its weight comes from the checkpoint.

    Built under ``torch.device("meta")``, an init would run torch's Python reference
    kernels, which import ``torch._dynamo`` (about a second and many MiB)."""

    def reset_parameters(self) -> None:
        pass


class Embedding(nn.Embedding):
    """``nn.Embedding`` without the random init (see :class:`Linear`)."""

    def reset_parameters(self) -> None:
        pass


class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class RotaryEmbedding(nn.Module):
    """The default rotary embedding: cos/sin of ``position * inv_freq`` in float32."""

    inv_freq: torch.Tensor

    def __init__(self, head_dim: int, base: float) -> None:
        super().__init__()
        # On the CPU even while the model's modules are built on the meta device.
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float, device="cpu") / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = position_ids[..., None].float() * self.inv_freq.to(device=x.device, dtype=torch.float)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype=x.dtype), emb.sin().to(dtype=x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    """Self-attention. With ``fused``, q, k and v are one ``qkv_proj`` (one matmul
    instead of three per layer; a batch-1 decode step is many small matmuls): each
    output is the same weight row's dot product, but the GEMM kernel may block a
    wider matrix differently, so the loader fuses only in 16-bit dtypes, where the
    results stayed bit-identical here, and keeps float32 exact (see the README)."""

    def __init__(self, config: LlamaConfig, layer_idx: int, *, fused: bool = False) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.head_dim = config.head_dim
        self.scaling = self.head_dim**-0.5
        self.fused = fused
        heads, kv_heads, hidden = config.num_attention_heads, config.num_key_value_heads, config.hidden_size
        self.split = [heads * self.head_dim, kv_heads * self.head_dim, kv_heads * self.head_dim]
        if fused:
            self.qkv_proj = Linear(hidden, sum(self.split), bias=False)
        else:
            self.q_proj = Linear(hidden, self.split[0], bias=False)
            self.k_proj = Linear(hidden, self.split[1], bias=False)
            self.v_proj = Linear(hidden, self.split[2], bias=False)
        self.o_proj = Linear(heads * self.head_dim, hidden, bias=False)

    def forward(
        self, hidden_states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, step: StepLayout
    ) -> torch.Tensor:
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        if self.fused:
            q, k, v = self.qkv_proj(hidden_states).split(self.split, dim=-1)
            query = q.reshape(hidden_shape).transpose(1, 2)
            key = k.reshape(hidden_shape).transpose(1, 2)
            value = v.reshape(hidden_shape).transpose(1, 2)
        else:
            query = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
            key = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
            value = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        query = (query * cos) + (rotate_half(query) * sin)
        key = (key * cos) + (rotate_half(key) * sin)
        out, _ = paged_attention_forward(self, query, key, value, None, scaling=self.scaling, flexserv_step=step)
        projected: torch.Tensor = self.o_proj(out.reshape(*input_shape, -1).contiguous())
        return projected


class MLP(nn.Module):
    """SwiGLU; with ``fused``, gate and up are one ``gate_up_proj`` (see :class:`Attention`)."""

    def __init__(self, config: LlamaConfig, *, fused: bool = False) -> None:
        super().__init__()
        self.fused = fused
        if fused:
            self.gate_up_proj = Linear(config.hidden_size, 2 * config.intermediate_size, bias=False)
        else:
            self.gate_proj = Linear(config.hidden_size, config.intermediate_size, bias=False)
            self.up_proj = Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused:
            gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        else:
            gate, up = self.gate_proj(x), self.up_proj(x)
        down: torch.Tensor = self.down_proj(F.silu(gate) * up)
        return down


class DecoderLayer(nn.Module):
    def __init__(self, config: LlamaConfig, layer_idx: int, *, fused: bool) -> None:
        super().__init__()
        self.self_attn = Attention(config, layer_idx, fused=fused)
        self.mlp = MLP(config, fused=fused)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(
        self, hidden_states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, step: StepLayout
    ) -> torch.Tensor:
        residual = hidden_states
        hidden_states = residual + self.self_attn(self.input_layernorm(hidden_states), cos, sin, step)
        residual = hidden_states
        mlp_out: torch.Tensor = self.mlp(self.post_attention_layernorm(hidden_states))
        return residual + mlp_out


class LlamaModel(nn.Module):
    def __init__(self, config: LlamaConfig, *, fused: bool) -> None:
        super().__init__()
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.layers = nn.ModuleList(DecoderLayer(config, i, fused=fused) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(config.head_dim, config.rope_theta)


class LlamaForCausalLM(nn.Module):
    """Called like transformers' model by the engine's runner (``input_ids`` or
    ``inputs_embeds`` of shape ``[1, T]``, ``position_ids``, ``logits_to_keep``,
    ``flexserv_step``); returns an object with ``logits`` ``[1, k, vocab]``."""

    #: The runner's cue that this model calls the paged attention itself.
    computes_paged_attention = True

    def __init__(
        self, config: LlamaConfig, generation_config: GenerationDefaults | None = None, *, fused: bool = False
    ) -> None:
        super().__init__()
        self.config = config
        self.generation_config = generation_config or GenerationDefaults(
            eos_token_id=config.eos_token_id, bos_token_id=config.bos_token_id, pad_token_id=config.pad_token_id
        )
        self.model = LlamaModel(config, fused=fused)
        self.lm_head = Linear(config.hidden_size, config.vocab_size, bias=False)

    @property
    def device(self) -> torch.device:
        return self.model.embed_tokens.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.model.embed_tokens.weight.dtype

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.embed_tokens

    def get_output_embeddings(self) -> Any:
        """``lm_head``: an ``nn.Linear``, or an int8 layer after int8 quantization."""
        return self.lm_head

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        *,
        position_ids: torch.Tensor,
        logits_to_keep: torch.Tensor,
        flexserv_step: StepLayout,
        inputs_embeds: torch.Tensor | None = None,
        **_ignored: Any,  # attention_mask, use_cache: what transformers' models take and this one needs not
    ) -> CausalLMOutput:
        model = self.model
        if inputs_embeds is None:
            assert input_ids is not None
            inputs_embeds = model.embed_tokens(input_ids)
        hidden_states = inputs_embeds
        cos, sin = model.rotary_emb(hidden_states, position_ids)
        for layer in model.layers:
            hidden_states = layer(hidden_states, cos, sin, flexserv_step)
        hidden_states = model.norm(hidden_states)
        return CausalLMOutput(logits=self.lm_head(hidden_states[:, logits_to_keep, :]))
