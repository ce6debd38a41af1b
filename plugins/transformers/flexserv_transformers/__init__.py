"""The transformers text-generation backend plugin (distribution ``flexserv-transformers``)."""

import os

from flexserv_core import prefer_passive_openmp

# Before any module of this package imports torch (see flexserv_core.openmp).
prefer_passive_openmp()

# oneDNN compiles and keeps a kernel for every matmul shape it meets (1,024 by
# default). The engine's step shapes change with every batch, so under varied
# traffic that cache kept growing resident memory: 2,000 requests at c=20 grew
# RSS 5.6-13.2% with the default and 4.2-4.7% with 16, at the same throughput
# (docs/benchmarks.md, issue 15). Read when oneDNN first runs; a value already
# in the environment wins.
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "16")
