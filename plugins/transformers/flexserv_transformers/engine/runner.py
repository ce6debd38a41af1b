"""Turns a step's plan into one forward pass over the flattened ragged batch."""

from __future__ import annotations

from typing import Any

import torch

from flexserv_core import InvalidRequest
from flexserv_transformers.engine.kv_cache import (
    ATTN_IMPL,
    DecodeBatch,
    PagedKVCache,
    PrefillChunk,
    StepLayout,
    UnsupportedAttention,
    register_attention,
)
from flexserv_transformers.engine.sequence import Sequence
from flexserv_transformers.media import image_features


def kv_geometry(model: Any) -> tuple[int, int, int]:
    """``(num_layers, kv_heads, head_dim)`` of a decoder-only transformers model."""
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    heads = cfg.num_attention_heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    return cfg.num_hidden_layers, kv_heads, head_dim


class ModelRunner:
    """Owns the model (switched to the paged attention) and its KV cache."""

    def __init__(self, model: Any, cache: PagedKVCache, *, batch_invariant: bool = False) -> None:
        """``batch_invariant``: lay steps out so that a row's attention does not depend
        on the step's other rows (see :meth:`layout`)."""
        # FlexServ's own forward (flexserv_transformers.native) calls the paged
        # attention itself; a transformers model is switched to it.
        if not getattr(model, "computes_paged_attention", False):
            register_attention()
            model.set_attn_implementation(ATTN_IMPL)
        self.model = model
        self.cache = cache
        self.batch_invariant = batch_invariant
        self.device = next(model.parameters()).device
        self._no_mask = torch.empty(1, 1, 0, 0, dtype=torch.bool, device=self.device)
        self._offsets = torch.arange(cache.block_size, device=self.device)
        #: Prompts whose images went through the vision encoder (a cache hit on them does not).
        self.images_encoded = 0
        #: The sliding window each attention layer asked for in the load-time probe
        #: (:meth:`unservable`); ``None`` for a layer that attends globally.
        self.layer_windows: dict[int, int | None] = {}

    @property
    def window(self) -> int | None:
        """The largest sliding window when every attention layer has one (the most
        positions back any layer reads), else ``None``. Known after :meth:`unservable`."""
        windows = list(self.layer_windows.values())
        if not windows or len(windows) < kv_geometry(self.model)[0] or any(w is None for w in windows):
            return None
        return max(w for w in windows if w is not None)

    @torch.inference_mode()
    def unservable(self) -> str | None:
        """Why the paged attention cannot serve this model, or ``None`` when it can.

        Runs a two-token prefill into block 0 (cleared before it is handed out) and
        checks that every attention layer called the paged attention with the step's
        layout and asked for nothing it does not implement, recording the sliding
        window each asked for (:attr:`window`). A model whose attention
        does not go through transformers' attention interface (its layers do not
        pass the model's keyword arguments on, or compute attention themselves)
        would otherwise fail, or be wrong, on every request."""
        num_layers = kv_geometry(self.model)[0]
        n = min(2, self.cache.block_size)  # tokens that fit in block 0
        layout = StepLayout(
            cache=self.cache,
            slots=self._tensor(list(range(n))),
            decodes=[],
            prefills=[PrefillChunk(q_start=0, q_len=n, ctx_len=n, blocks=self._tensor([0]))],
            layers_seen={},
        )
        ids = self._tensor([list(range(n))])
        try:
            self.model(
                input_ids=ids,
                position_ids=torch.arange(ids.shape[1], device=self.device)[None],
                attention_mask=self._no_mask,
                use_cache=False,
                logits_to_keep=self._tensor([n - 1]),
                flexserv_step=layout,
            )
        except UnsupportedAttention as exc:
            return str(exc)
        except Exception as exc:
            return f"its forward fails under the paged attention ({type(exc).__name__}: {exc})"
        seen = layout.layers_seen or {}
        self.layer_windows = dict(seen)
        if len(seen) < num_layers:
            return f"only {len(seen)} of its {num_layers} attention layers call the paged attention"
        return None

    def clear_blocks(self, blocks: list[int]) -> None:
        self.cache.clear_blocks(self._tensor(blocks))

    def _tensor(self, data: list[int] | list[list[int]]) -> torch.Tensor:
        return torch.tensor(data, dtype=torch.long, device=self.device)

    def layout(self, plan: list[tuple[Sequence, int]]) -> tuple[torch.Tensor, torch.Tensor, StepLayout, list[int]]:
        """Input ids, positions, the attention layout, and the row offsets whose
        logits are needed (the last new token of each sequence that completes, and
        every position of a sequence verifying a speculative draft: its tokens
        follow ``tokens`` in the step, see :mod:`.speculative`).

        A sequence's attention reads its table from its first block still held
        (``num_released``: a windowed model releases the blocks behind its window).

        Decode rows normally share one batch padded to the longest table. A
        :attr:`batch_invariant` runner instead pads each row's table to
        :func:`decode_width` of its own length, one batch per width, and lays a
        verified draft's rows out as decode rows, each over the positions up to its
        own: a row is then computed as it would be alone, whatever else the step
        holds. With row-wise linear layers (int8 rows) the whole forward is then
        batch-invariant, and a draft's verification gives bit for bit the logits of
        plain decoding, so speculation cannot change tokens."""
        bs = self.cache.block_size
        ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        decode_rows: list[tuple[int, list[int], int]] = []  # (row, table, length from the table's start)
        draft_rows: list[list[tuple[int, list[int], int]]] = []  # the same, one list per verified draft
        prefills: list[PrefillChunk] = []
        keep: list[int] = []
        trimmed = False
        for seq, n in plan:
            start, row = seq.num_computed, len(ids)
            ids.extend(seq.tokens[start : start + n])
            if seq.draft:
                ids.extend(seq.draft)
            positions.extend(range(start, start + n))
            blocks = seq.blocks
            slots.extend(blocks[p // bs] * bs + p % bs for p in range(start, start + n))
            ctx = start + n
            base = seq.num_released
            used = blocks[base : -(-ctx // bs)]
            if n == 1:
                decode_rows.append((row, used, ctx - base * bs))
                trimmed = trimmed or base > 0
            elif seq.draft and self.batch_invariant:
                draft_rows.append([(row + i, used, start + i + 1 - base * bs) for i in range(n)])
                trimmed = trimmed or base > 0
            else:
                prefills.append(
                    PrefillChunk(q_start=row, q_len=n, ctx_len=ctx, blocks=self._tensor(used), first_block=base)
                )
            if seq.draft:
                keep.extend(range(row + n - 1 - len(seq.draft), row + n))
            elif ctx == len(seq.tokens):
                keep.append(row + n - 1)
        decodes: list[DecodeBatch] = []
        if not self.batch_invariant:
            if decode_rows:
                width = max(len(table) for _, table, _ in decode_rows)
                decodes.append(self._decode_batch(decode_rows, width, trimmed, len(ids)))
        else:
            # A draft's rows read one table, gathered once per width (shared).
            for entries, shared in [(decode_rows, False), *((rows, True) for rows in draft_rows)]:
                by_width: dict[int, list[tuple[int, list[int], int]]] = {}
                for entry in entries:
                    by_width.setdefault(decode_width(-(-entry[2] // bs), bs), []).append(entry)
                decodes.extend(
                    self._decode_batch(group, width, trimmed, len(ids), shared=shared)
                    for width, group in by_width.items()
                )
        layout = StepLayout(
            cache=self.cache,
            slots=self._tensor(slots),
            decodes=decodes,
            prefills=prefills,
            single_thread_decode=self.batch_invariant,
        )
        return self._tensor(ids), self._tensor(positions), layout, keep

    def _decode_batch(
        self,
        entries: list[tuple[int, list[int], int]],
        width: int,
        trimmed: bool,
        row_length: int,
        *,
        shared: bool = False,
    ) -> DecodeBatch:
        """One batch of decode rows over tables padded (or cut) to ``width`` blocks;
        positions past a row's length are masked out. ``shared``: the rows' tables are
        one table, kept once."""
        bs = self.cache.block_size
        tables = entries[:1] if shared else entries
        table = self._tensor([(t + [0] * (width - len(t)))[:width] for _, t, _ in tables])
        lens = self._tensor([length for _, _, length in entries])
        span = torch.arange(width * bs, device=self.device)
        return DecodeBatch(
            rows=self._tensor([row for row, _, _ in entries]),
            blocks=table,
            mask=(span[None, :] < lens[:, None]).view(len(entries), 1, 1, width * bs),
            is_whole_row=len(entries) == row_length,
            lens=lens,
            trimmed=trimmed,
            shared=shared,
        )

    def encode_images(self, plan: list[tuple[Sequence, int]]) -> list[tuple[Sequence, InvalidRequest]]:
        """Compute the image features this step's prefill chunks need and have not
        yet (a prefix-cache hit on the whole image never needs them, so the vision
        encoder is skipped). Returns the sequences whose images cannot be served
        (features not one per image token), with why: the engine fails those alone,
        before the step's forward pass, instead of failing the whole batch."""
        refused: list[tuple[Sequence, InvalidRequest]] = []
        for _row, seq, _n in _image_chunks(plan):
            media = seq.media
            assert media is not None
            if media.features is not None:
                continue
            try:
                media.features = image_features(self.model, media)
            except InvalidRequest as exc:
                refused.append((seq, exc))
                continue
            media.inputs = {}
            self.images_encoded += 1
        return refused

    def embeddings(self, ids: torch.Tensor, plan: list[tuple[Sequence, int]]) -> torch.Tensor | None:
        """The row's input embeddings with image features at the image tokens of this
        step's prefill chunks; ``None`` when no chunk holds an image token (the model
        then embeds ``ids`` itself). Features come from :meth:`encode_images`."""
        chunks = _image_chunks(plan)
        if not chunks:
            return None
        if self.encode_images(plan):
            raise RuntimeError("a sequence whose images cannot be served was left in the step's plan")
        embeds: torch.Tensor = self.model.get_input_embeddings()(ids)
        for row, seq, n in chunks:
            media = seq.media
            assert media is not None and media.features is not None
            index = media.index(seq.num_computed, seq.num_computed + n).to(self.device)
            where = (index >= 0).nonzero().squeeze(1)
            embeds[row + where] = media.features[index[where]].to(embeds.dtype)
        return embeds

    @torch.inference_mode()
    def forward(self, plan: list[tuple[Sequence, int]]) -> tuple[torch.Tensor, list[int]]:
        """Run the step; return last-position logits ``[k, vocab]`` and, for each
        row, the index in ``plan`` of the sequence it belongs to (a speculative
        sequence has ``len(draft) + 1`` consecutive rows). Image features
        enter as input embeddings (see :meth:`embeddings`)."""
        ids, positions, layout, keep = self.layout(plan)
        embeds = self.embeddings(ids, plan)
        inputs = {"input_ids": ids[None]} if embeds is None else {"inputs_embeds": embeds[None]}
        out = self.model(
            **inputs,
            position_ids=positions[None],
            attention_mask=self._no_mask,
            use_cache=False,
            logits_to_keep=self._tensor(keep),
            flexserv_step=layout,
        )
        owners = [
            i
            for i, (seq, n) in enumerate(plan)
            if seq.num_computed + n == len(seq.tokens) + len(seq.draft)
            for _ in range(len(seq.draft) + 1)
        ]
        return out.logits[0], owners


def _image_chunks(plan: list[tuple[Sequence, int]]) -> list[tuple[int, Sequence, int]]:
    """``(row, sequence, tokens)`` of the planned chunks that hold image tokens."""
    return [
        (row, seq, n)
        for row, (seq, n) in zip(_row_starts(plan), plan, strict=True)
        if seq.media is not None and seq.media.overlaps(seq.num_computed, seq.num_computed + n)
    ]


def _row_starts(plan: list[tuple[Sequence, int]]) -> list[int]:
    """Offset of each planned sequence's first new token in the flattened row."""
    starts, row = [], 0
    for _seq, n in plan:
        starts.append(row)
        row += n
    return starts


#: The shortest table a batch-invariant decode row is padded to, in positions.
DECODE_WIDTH_QUANTUM = 128


def decode_width(blocks: int, block_size: int) -> int:
    """The table width, in blocks, of a batch-invariant decode row that needs
    ``blocks``: rounded up to a multiple of :data:`DECODE_WIDTH_QUANTUM` positions, so
    that it depends on the row's own length only (at most 127 masked positions more
    than it needs; the rows of a step fall into few widths)."""
    quantum = max(1, DECODE_WIDTH_QUANTUM // block_size)
    return -(-blocks // quantum) * quantum
