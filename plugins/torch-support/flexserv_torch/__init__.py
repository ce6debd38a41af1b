"""Torch helpers shared by FlexServ's torch plugins (a library, not a plugin).

Importing it does not import torch: a plugin calls :func:`prefer_passive_openmp`
from its package ``__init__`` before any of its modules imports torch. The int8
layers (:mod:`flexserv_torch.int8`) load on first use, torch with them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import lazy_loader

from flexserv_torch.devices import cpu_default_dtype, cpu_has_fast_bf16, no_accelerator_for_certain, pick_device
from flexserv_torch.imports import import_reporting
from flexserv_torch.openmp import IntraOpThreads, full_intra_op_threads, prefer_passive_openmp, use_all_intra_op_threads

if TYPE_CHECKING:
    from flexserv_torch.int8 import RowInt8Linear, fbgemm_available, pack_weight, quantize_linears

__all__ = [
    "IntraOpThreads",
    "RowInt8Linear",
    "cpu_default_dtype",
    "cpu_has_fast_bf16",
    "fbgemm_available",
    "full_intra_op_threads",
    "import_reporting",
    "no_accelerator_for_certain",
    "pack_weight",
    "pick_device",
    "prefer_passive_openmp",
    "quantize_linears",
    "use_all_intra_op_threads",
]

__getattr__, __dir__, _ = lazy_loader.attach(
    __name__, submod_attrs={"int8": ["RowInt8Linear", "fbgemm_available", "pack_weight", "quantize_linears"]}
)
