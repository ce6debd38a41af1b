"""Paged KV storage and the attention function that reads and writes it.

The model runs on a *flattened ragged batch*: the new tokens of every scheduled
sequence are concatenated into one row (batch dimension 1) with explicit
``position_ids``. Our attention function is registered with transformers'
``AttentionInterface`` under :data:`ATTN_IMPL`; every attention layer calls it with
the layer's new query/key/value for all those tokens, and it

1. writes the new keys and values into their slots (``block * block_size + offset``),
2. attends, for each sequence, over that sequence's blocks:
   single-token sequences (decodes) in one batched SDPA over their padded block
   tables, multi-token chunks (prefills) one SDPA call each with a causal mask
   offset by the already-cached length.

The per-step layout (:class:`StepLayout`) reaches the function through the model's
``**kwargs`` (``flexserv_step=...``), so nothing global changes per request. When
that kwarg is absent (a plain ``model.generate`` on the same model) the function
falls back to transformers' SDPA attention.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.nn.functional as F

from flexserv_transformers.engine.pages import no_huge_pages

ATTN_IMPL = "flexserv_paged"


class PagedKVCache:
    """Key and value tensors of shape ``[layers, num_blocks, block_size, kv_heads, head_dim]``.

    The budget (``num_blocks``) is allocated untouched, and only the first
    ``resident_blocks`` are zero-filled at load: on CPU the allocation is a fresh
    anonymous mapping, so a page costs memory only once it is written. The block
    manager hands out blocks so that the written part stays as small as traffic
    allows (see :mod:`.blocks`), and :meth:`clear_blocks` zero-fills every block
    it hands out. Memory is therefore flat from the first request as long as the
    live sequences fit in the resident part, while the budget still bounds the
    context and the concurrency. Before, the whole pool was zero-filled at load,
    because with the prefix cache keeping freed blocks and never-used blocks
    handed out before cached ones were evicted, a lazily touched pool grew towards
    its whole budget under traffic (RSS +20% over the first thousand requests).
    """

    def __init__(
        self,
        *,
        num_layers: int,
        num_blocks: int,
        block_size: int,
        kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device | str,
        resident_blocks: int | None = None,
    ) -> None:
        """``resident_blocks`` (default: all) are zero-filled now; the rest on hand-out."""
        shape = (num_layers, num_blocks, block_size, kv_heads, head_dim)
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.resident_blocks = num_blocks if resident_blocks is None else max(0, min(resident_blocks, num_blocks))
        self._k = torch.empty(shape, dtype=dtype, device=device)
        self._v = torch.empty(shape, dtype=dtype, device=device)
        if self.resident_blocks < num_blocks:
            no_huge_pages(self._k)
            no_huge_pages(self._v)
        self._k[:, : self.resident_blocks].zero_()
        self._v[:, : self.resident_blocks].zero_()
        self.keys = list(self._k.unbind(0))
        self.values = list(self._v.unbind(0))

    def clear_blocks(self, blocks: torch.Tensor) -> None:
        """Zero newly handed-out blocks. Padded decode attention reads a block's
        unwritten tail (masked out), and masked garbage that happens to be NaN or
        inf would still poison the softmax-weighted sum (0 * NaN = NaN)."""
        self._k.index_fill_(1, blocks, 0)
        self._v.index_fill_(1, blocks, 0)

    @staticmethod
    def bytes_per_block(*, num_layers: int, block_size: int, kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
        return 2 * num_layers * block_size * kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()


@dataclass(slots=True)
class PrefillChunk:
    """A sequence contributing ``q_len > 1`` tokens to this step."""

    q_start: int  # offset of its first new token in the flattened row
    q_len: int
    ctx_len: int  # cached + new tokens it attends over
    blocks: torch.Tensor  # [n_blocks] block ids covering ctx_len


@dataclass(slots=True)
class DecodeBatch:
    """The single-token sequences of a step, attended to in one batched SDPA call."""

    rows: torch.Tensor  # [B] offsets of single-token sequences in the row
    blocks: torch.Tensor  # [B, max_blocks] padded block tables
    mask: torch.Tensor  # [B, 1, 1, max_blocks * block_size], True = attend
    is_whole_row: bool  # every token of the row is a decode: skip the index ops


@dataclass(slots=True)
class StepLayout:
    """Where each new token goes and what each sequence attends to, for one step."""

    cache: PagedKVCache
    slots: torch.Tensor  # [T] cache slot of each new token
    decode: DecodeBatch | None  # None when no sequence decodes a single token
    prefills: list[PrefillChunk]


def paged_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,  # [1, heads, T, head_dim]
    key: torch.Tensor,  # [1, kv_heads, T, head_dim]
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    step: StepLayout | None = kwargs.get("flexserv_step")
    if step is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )
    # transformers' attention modules keep layer_idx as a plain int attribute, which
    # nn.Module.__getattr__ types as Tensor | Module.
    layer = cast(int, module.layer_idx)
    cache = step.cache
    k_blocks, v_blocks = cache.keys[layer], cache.values[layer]
    _, bs, kv_heads, head_dim = k_blocks.shape
    k_flat, v_flat = k_blocks.view(-1, kv_heads, head_dim), v_blocks.view(-1, kv_heads, head_dim)
    k_flat.index_copy_(0, step.slots, key[0].transpose(0, 1))
    v_flat.index_copy_(0, step.slots, value[0].transpose(0, 1))

    heads, total = query.shape[1], query.shape[2]
    n_rep = heads // kv_heads
    out = query.new_empty(1, total, heads, head_dim)

    decode = step.decode
    if decode is not None:
        batch = decode.rows.shape[0]
        q = query[0] if decode.is_whole_row else query[0].index_select(1, decode.rows)  # [H, B, D]
        # One query token per sequence: fold the query heads sharing a KV head into
        # the "query length" axis, so SDPA needs no repeated keys (GQA without copies).
        q = q.transpose(0, 1).reshape(batch, kv_heads, n_rep, head_dim)
        length = decode.blocks.shape[1] * bs
        # index_select, not k_blocks[table]: advanced indexing costs ~1000x more here (torch 2.13 CPU).
        flat_table = decode.blocks.view(-1)
        k = k_blocks.index_select(0, flat_table).view(batch, length, kv_heads, head_dim).transpose(1, 2)
        v = v_blocks.index_select(0, flat_table).view(batch, length, kv_heads, head_dim).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=decode.mask, scale=scaling)  # [B, kvH, n_rep, D]
        o = o.reshape(batch, heads, head_dim)
        if decode.is_whole_row:
            out[0] = o
        else:
            out[0].index_copy_(0, decode.rows, o)

    for chunk in step.prefills:
        s, n, ctx = chunk.q_start, chunk.q_len, chunk.ctx_len
        q = query[:, :, s : s + n, :]
        length = chunk.blocks.shape[0] * bs
        k = k_blocks.index_select(0, chunk.blocks).view(1, length, kv_heads, head_dim)[:, :ctx].transpose(1, 2)
        v = v_blocks.index_select(0, chunk.blocks).view(1, length, kv_heads, head_dim)[:, :ctx].transpose(1, 2)
        if n_rep > 1:
            k = k.repeat_interleave(n_rep, dim=1)
            v = v.repeat_interleave(n_rep, dim=1)
        if ctx == n:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scaling)
        else:
            past = ctx - n
            rows = torch.arange(n, device=query.device)[:, None] + past
            mask = torch.arange(ctx, device=query.device)[None, :] <= rows
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scaling)
        out[0, s : s + n] = o[0].transpose(0, 1)
    return out, None


def register_attention() -> None:
    """Register the paged attention (idempotent). Its mask function is SDPA's, so a
    model switched to it still works with ``model.generate`` (the fallback path).
    transformers is imported here, not at the top: FlexServ's own forward
    (:mod:`flexserv_transformers.native`) calls the function directly and the
    engine then imports no transformers modelling code."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(ATTN_IMPL, paged_attention_forward)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ATTN_IMPL, sdpa_mask)
