"""Paged KV storage and the attention function that reads and writes it.

The model runs on a *flattened ragged batch*: the new tokens of every scheduled
sequence are concatenated into one row (batch dimension 1) with explicit
``position_ids``. Our attention function is registered with transformers'
``AttentionInterface`` under :data:`ATTN_IMPL`; every attention layer calls it with
the layer's new query/key/value for all those tokens, and it

1. writes the new keys and values into their slots (``block * block_size + offset``),
2. attends, for each sequence, over that sequence's blocks:
   single-token rows (decodes) in one batched SDPA per :class:`DecodeBatch` over
   their padded block tables, multi-token chunks (prefills) one SDPA call each with
   a causal mask offset by the already-cached length.

A *batch-invariant* layout (:mod:`.runner`) pads each decode row's table to a width
that depends on that row's own length only, one batch per width, so a row's
attention is computed the same way whatever else the step holds; a verified draft's
rows are then decode rows too (see :mod:`.runner`).

A windowed model's sequences give back the blocks that fell out of every layer's
window (:mod:`.blocks`), so their tables do not start at block 0: a chunk's
``first_block`` and a decode row's trimmed table say where they start, and a
layer without a window (which would read the released blocks) fails loudly.

The per-step layout (:class:`StepLayout`) reaches the function through the model's
``**kwargs`` (``flexserv_step=...``), so nothing global changes per request. When
that kwarg is absent (a plain ``model.generate`` on the same model) the function
falls back to transformers' SDPA attention.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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
    blocks: torch.Tensor  # [n_blocks] block ids covering ctx_len from block first_block on
    first_block: int = 0  # blocks before it were released (out of every layer's window)


@dataclass(slots=True)
class DecodeBatch:
    """Single-token rows of a step attended to in one batched SDPA call, over tables
    padded to one width.

    A windowed model's tables start at each sequence's first block still held, and
    ``lens`` counts from there: only a windowed layer may read them (``trimmed``)."""

    rows: torch.Tensor  # [B] offsets of single-token sequences in the row
    blocks: torch.Tensor  # [B, max_blocks] padded block tables ([1, max_blocks] when shared)
    mask: torch.Tensor  # [B, 1, 1, max_blocks * block_size], True = attend
    is_whole_row: bool  # every token of the row is a decode: skip the index ops
    lens: torch.Tensor | None = None  # [B] context length of each sequence from its table's start
    trimmed: bool = False  # some table leaves out released leading blocks
    windowed: dict[int, torch.Tensor] = field(default_factory=dict)  # window -> mask, built once per step
    shared: bool = False  # every row reads the one table (a draft's rows): its K/V gathered once

    def window_mask(self, window: int) -> torch.Tensor:
        """:attr:`mask` narrowed to each sequence's last ``window`` positions (the new token included)."""
        mask = self.windowed.get(window)
        if mask is None:
            assert self.lens is not None, "a windowed decode needs the sequences' lengths"
            span = torch.arange(self.mask.shape[-1], device=self.mask.device)
            mask = self.mask & (span[None, :] >= self.lens[:, None] - window).view(self.mask.shape)
            self.windowed[window] = mask
        return mask


@dataclass(slots=True)
class StepLayout:
    """Where each new token goes and what each sequence attends to, for one step."""

    cache: PagedKVCache
    slots: torch.Tensor  # [T] cache slot of each new token
    decodes: list[DecodeBatch]  # empty when no row decodes a single token
    prefills: list[PrefillChunk]
    #: Decode attention on one intra-op thread: torch's CPU SDPA computes a row
    #: differently depending on which thread takes it, so a batch-invariant layout needs it.
    single_thread_decode: bool = False
    #: When a dict, each layer whose attention ran and the sliding window it asked for
    #: (the load-time probe's record).
    layers_seen: dict[int, int | None] | None = None


#: Arguments that reach the attention function and change nothing in it:
#: ``position_ids`` is read by flash-attention kernels only (positions reach the
#: model through its rotary embeddings); ``use_cache`` and ``output_router_logits``
#: are model-level flags (transformers' own cache, mixture-of-experts outputs)
#: that the layers hand on with their other keyword arguments.
IGNORED_ARGUMENTS = frozenset({"position_ids", "use_cache", "output_router_logits"})


class UnsupportedAttention(RuntimeError):
    """The model asked the paged attention for something it does not implement (an
    argument it does not know, dropout): serving it would give wrong tokens."""


def paged_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,  # [1, heads, T, head_dim]
    key: torch.Tensor,  # [1, kv_heads, T, head_dim]
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    sliding_window: int | None = None,
    softcap: float | None = None,
    s_aux: torch.Tensor | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention interface over the paged cache.

    Implements ``scaling``, ``sliding_window`` (a query attends to the last
    ``sliding_window`` positions, itself included, as transformers' masks do),
    ``softcap`` (Gemma 2's ``tanh`` capping of the attention logits) and ``s_aux``
    (GPT-OSS's per-head attention sinks). Any other argument, or a non-zero
    ``dropout``, raises :class:`UnsupportedAttention`: a transformers release that
    adds an argument fails the tests (and the load-time probe) instead of serving
    tokens computed without it."""
    step: StepLayout | None = kwargs.pop("flexserv_step", None)
    if step is None:
        return _fallback(
            module, query, key, value, attention_mask, scaling, dropout, sliding_window, softcap, s_aux, kwargs
        )
    unknown = sorted(name for name in kwargs if name not in IGNORED_ARGUMENTS)
    if unknown or dropout or not getattr(module, "is_causal", True):
        what = (
            f"the argument(s) {', '.join(unknown)}"
            if unknown
            else f"dropout={dropout}"
            if dropout
            else "bidirectional (non-causal) attention"
        )
        raise UnsupportedAttention(
            f"{type(module).__name__} asks the paged attention for {what}, which it does not implement"
        )
    # transformers' attention modules keep layer_idx as a plain int attribute, which
    # nn.Module.__getattr__ types as Tensor | Module.
    layer = cast(int, module.layer_idx)
    if step.layers_seen is not None:
        step.layers_seen[layer] = sliding_window
    cache = step.cache
    k_blocks, v_blocks = cache.keys[layer], cache.values[layer]
    _, bs, kv_heads, head_dim = k_blocks.shape
    k_flat, v_flat = k_blocks.view(-1, kv_heads, head_dim), v_blocks.view(-1, kv_heads, head_dim)
    k_flat.index_copy_(0, step.slots, key[0].transpose(0, 1))
    v_flat.index_copy_(0, step.slots, value[0].transpose(0, 1))

    heads, total = query.shape[1], query.shape[2]
    n_rep = heads // kv_heads
    out = query.new_empty(1, total, heads, head_dim)
    logits = _Logits(scaling, softcap, s_aux)

    threads = torch.get_num_threads() if step.single_thread_decode and step.decodes else 1
    if threads > 1:
        torch.set_num_threads(1)
    try:
        _attend_decodes(module, query, k_blocks, v_blocks, out, logits, sliding_window, step.decodes)
    finally:
        if threads > 1:
            torch.set_num_threads(threads)

    for chunk in step.prefills:
        s, n, ctx = chunk.q_start, chunk.q_len, chunk.ctx_len
        q = query[:, :, s : s + n, :]
        past = ctx - n
        window = sliding_window if sliding_window is not None and sliding_window < ctx else None
        # Blocks wholly before the window of the chunk's first token are not read.
        skip = 0 if window is None else max(0, past - window + 1) // bs
        if skip < chunk.first_block:
            raise _released_blocks_read(module)
        skip -= chunk.first_block
        blocks = chunk.blocks[skip:] if skip else chunk.blocks
        first, length = (chunk.first_block + skip) * bs, blocks.shape[0] * bs
        k = k_blocks.index_select(0, blocks).view(1, length, kv_heads, head_dim)[:, : ctx - first].transpose(1, 2)
        v = v_blocks.index_select(0, blocks).view(1, length, kv_heads, head_dim)[:, : ctx - first].transpose(1, 2)
        if n_rep > 1:
            k = k.repeat_interleave(n_rep, dim=1)
            v = v.repeat_interleave(n_rep, dim=1)
        prefill_mask: torch.Tensor | None = None  # None: plain causal over the whole context
        if ctx != n or window is not None:
            rows = torch.arange(past, ctx, device=query.device)[:, None]
            cols = torch.arange(first, ctx, device=query.device)[None, :]
            prefill_mask = cols <= rows
            if window is not None:
                prefill_mask &= cols > rows - window
        o = logits.attend(q, k, v, prefill_mask, sink_heads=(heads, 1))
        out[0, s : s + n] = o[0].transpose(0, 1)
    return out, None


def _attend_decodes(
    module: torch.nn.Module,
    query: torch.Tensor,
    k_blocks: torch.Tensor,
    v_blocks: torch.Tensor,
    out: torch.Tensor,
    logits: _Logits,
    sliding_window: int | None,
    decodes: list[DecodeBatch],
) -> None:
    """Each decode batch in one SDPA call: the rows' queries over their padded tables."""
    _, bs, kv_heads, head_dim = k_blocks.shape
    heads = query.shape[1]
    n_rep = heads // kv_heads
    for decode in decodes:
        batch = decode.rows.shape[0]
        q = query[0] if decode.is_whole_row else query[0].index_select(1, decode.rows)  # [H, B, D]
        # One query token per sequence: fold the query heads sharing a KV head into
        # the "query length" axis, so SDPA needs no repeated keys (GQA without copies).
        q = q.transpose(0, 1).reshape(batch, kv_heads, n_rep, head_dim)
        length = decode.blocks.shape[1] * bs
        # index_select, not k_blocks[table]: advanced indexing costs ~1000x more here (torch 2.13 CPU).
        flat_table = decode.blocks.view(-1)
        tables = decode.blocks.shape[0]
        k = k_blocks.index_select(0, flat_table).view(tables, length, kv_heads, head_dim).transpose(1, 2)
        v = v_blocks.index_select(0, flat_table).view(tables, length, kv_heads, head_dim).transpose(1, 2)
        if decode.shared:
            k, v = k.expand(batch, -1, -1, -1), v.expand(batch, -1, -1, -1)
        if sliding_window is None and decode.trimmed:
            raise _released_blocks_read(module)
        mask = decode.mask if sliding_window is None else decode.window_mask(sliding_window)
        o = logits.attend(q, k, v, mask, sink_heads=(kv_heads, n_rep))  # [B, kvH, n_rep, D]
        o = o.reshape(batch, heads, head_dim)
        if decode.is_whole_row:
            out[0] = o
        else:
            out[0].index_copy_(0, decode.rows, o)


def _released_blocks_read(module: torch.nn.Module) -> RuntimeError:
    return RuntimeError(
        f"{type(module).__name__} (layer {module.layer_idx}) attends beyond the window the engine keeps "
        "blocks for: the engine took the model for windowed on every layer"
    )


@dataclass(slots=True)
class _Logits:
    """How attention logits are formed: scaled, optionally soft-capped, optionally
    normalised together with a per-head sink logit."""

    scaling: float | None
    softcap: float | None
    sinks: torch.Tensor | None  # [heads]

    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None,
        *,
        sink_heads: tuple[int, int],
    ) -> torch.Tensor:
        """Attention of ``q`` ``[B, h, Lq, D]`` over ``k``/``v`` ``[B, h, Lk, D]``;
        ``mask`` (True = attend) broadcasts to ``[B, h, Lq, Lk]``, ``None`` is causal
        (``Lq == Lk``). ``sink_heads`` is how the model's heads map onto ``h`` and
        ``Lq``: ``(heads, 1)``, or ``(kv_heads, n_rep)`` for folded decode queries."""
        if self.softcap is None and self.sinks is None:
            if mask is None:
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scaling)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scaling)
        # SDPA can neither cap nor add a sink: the eager formula of Gemma 2 / GPT-OSS.
        scale = q.shape[-1] ** -0.5 if self.scaling is None else self.scaling
        weights = torch.matmul(q, k.transpose(-1, -2)) * scale
        if self.softcap is not None:
            weights = torch.tanh(weights / self.softcap) * self.softcap
        if mask is None:
            mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
        weights = weights.masked_fill(~mask, float("-inf"))
        if self.sinks is None:
            probs = F.softmax(weights, dim=-1, dtype=torch.float32).to(q.dtype)
        else:
            h, per = sink_heads
            sink = self.sinks.to(weights.dtype).view(1, h, per, 1).expand(*weights.shape[:-1], 1)
            combined = torch.cat([weights, sink], dim=-1)
            combined = combined - combined.amax(dim=-1, keepdim=True)
            probs = F.softmax(combined, dim=-1, dtype=combined.dtype)[..., :-1]
        return torch.matmul(probs, v)


def _fallback(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None,
    dropout: float,
    sliding_window: int | None,
    softcap: float | None,
    s_aux: torch.Tensor | None,
    kwargs: dict[str, Any],
) -> tuple[torch.Tensor, None]:
    """A plain forward on the switched model (``model.generate``): transformers' SDPA
    attention, or, for what SDPA cannot compute (soft-capping, sinks), the eager
    formula over the same boolean mask (its window already in it)."""
    from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward

    if softcap is None and s_aux is None:
        return sdpa_attention_forward(
            module,
            query,
            key,
            value,
            attention_mask,
            scaling=scaling,
            dropout=dropout,
            sliding_window=sliding_window,
            **kwargs,
        )
    heads = query.shape[1]
    key, value = repeat_kv(key, heads // key.shape[1]), repeat_kv(value, heads // key.shape[1])
    mask = attention_mask
    if mask is not None:
        mask = mask[..., : key.shape[-2]]
        if mask.dtype != torch.bool:
            mask = mask == 0
    elif query.shape[2] > 1:  # SDPA's convention: a missing mask over a longer cache is its causal prefix
        key, value = key[:, :, : query.shape[2]], value[:, :, : query.shape[2]]
    else:
        mask = torch.ones(1, 1, 1, key.shape[2], dtype=torch.bool, device=query.device)
    o = _Logits(scaling, softcap, s_aux).attend(query, key, value, mask, sink_heads=(heads, 1))
    return o.transpose(1, 2).contiguous(), None


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
