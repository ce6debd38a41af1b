"""The paged attention's batch-invariant decode layout (used on int8 rows): a row's
output is bit for bit the same alone, in a wide batch of other rows, and as one of a
verified draft's rows sharing a table, on every intra-op thread count."""

from __future__ import annotations

import pytest
import torch
from flexserv_transformers.engine.kv_cache import DecodeBatch, PagedKVCache, StepLayout, paged_attention_forward
from flexserv_transformers.engine.runner import decode_width
from torch import nn

BS, KV_HEADS, HEADS, DIM = 16, 3, 9, 64  # SmolLM2-135M's attention geometry


class Layer(nn.Module):
    layer_idx = 0
    is_causal = True


def batch(rows: list[int], tables: list[list[int]], lens: list[int], *, shared: bool = False) -> DecodeBatch:
    width = decode_width(-(-max(lens) // BS), BS)
    padded = [(t + [0] * width)[:width] for t in tables]
    span = torch.arange(width * BS)
    return DecodeBatch(
        rows=torch.tensor(rows),
        blocks=torch.tensor(padded[:1] if shared else padded),
        mask=(span[None, :] < torch.tensor(lens)[:, None]).view(len(rows), 1, 1, width * BS),
        is_whole_row=False,
        lens=torch.tensor(lens),
        shared=shared,
    )


def attend(cache: PagedKVCache, query: torch.Tensor, decodes: list[DecodeBatch]) -> torch.Tensor:
    """The attention output ``[rows, heads, dim]`` of one layer over ``cache``."""
    total = query.shape[2]
    scratch = torch.arange(total) + (cache.num_blocks - 4) * BS  # the new K/V go to blocks no table reads
    layout = StepLayout(cache=cache, slots=scratch, decodes=decodes, prefills=[], single_thread_decode=True)
    key = torch.zeros(1, KV_HEADS, total, DIM)
    out, _ = paged_attention_forward(Layer(), query, key, key.clone(), None, scaling=DIM**-0.5, flexserv_step=layout)
    return out[0]


@pytest.mark.parametrize("threads", [1, 2])
def test_a_row_is_computed_the_same_alone_in_a_batch_and_in_a_draft(threads: int) -> None:
    torch.manual_seed(0)
    cache = PagedKVCache(
        num_layers=1, num_blocks=160, block_size=BS, kv_heads=KV_HEADS, head_dim=DIM, dtype=torch.float32, device="cpu"
    )
    cache._k.normal_()
    cache._v.normal_()
    generator = torch.Generator().manual_seed(1)
    rows = 12
    lens = torch.randint(390, 512, (rows,), generator=generator).tolist()  # one decode width (512)
    tables = [torch.randperm(150, generator=generator)[: -(-n // BS)].tolist() for n in lens]
    query = torch.randn(1, HEADS, rows, DIM, generator=generator)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        together = attend(cache, query, [batch(list(range(rows)), tables, lens)])
        for i in range(rows):
            alone = attend(cache, query[:, :, i : i + 1], [batch([0], [tables[i]], [lens[i]])])
            assert torch.equal(alone[0], together[i]), f"row {i}"
        # row 0's sequence verifying a 5-token draft: six rows over its one table, shared
        draft = [lens[0] - 5 + j for j in range(6)]
        drafted = attend(cache, query[:, :, :6], [batch(list(range(6)), [tables[0]], draft, shared=True)])
        for j, n in enumerate(draft):
            alone = attend(cache, query[:, :, j : j + 1], [batch([0], [tables[0]], [n])])
            assert torch.equal(alone[0], drafted[j]), f"draft row {j}"
    finally:
        torch.set_num_threads(before)
