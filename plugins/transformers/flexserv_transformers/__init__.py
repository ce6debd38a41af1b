"""The transformers text-generation backend plugin (distribution ``flexserv-transformers``)."""

import os

from flexserv_torch import prefer_passive_openmp

# Before any module of this package imports torch (see flexserv_torch.openmp).
prefer_passive_openmp()

# oneDNN compiles and keeps a kernel for every matmul shape it meets, in two caches:
# oneDNN's own primitive cache and the one of ideep, torch's oneDNN wrapper, which
# holds each matmul primitive with its buffers (~260 KiB apiece here); both keep 1,024
# by default. The engine's step shapes change with every batch, so under varied
# traffic they kept growing resident memory: 2,000 requests at c=20 grew RSS 5.6-13.2%
# with oneDNN's default and 4.2-4.7% with 16; with the same 50 prompts repeating,
# ideep's cache alone held ~51 MiB more after 1,000 requests (heaptrack), growth
# 14.6%, against 2.2% with 16, at the same throughput (docs/benchmarks.md, issue 15).
# Both are read when oneDNN first runs; a value already in the environment wins.
for _cache in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY"):
    os.environ.setdefault(_cache, "16")
