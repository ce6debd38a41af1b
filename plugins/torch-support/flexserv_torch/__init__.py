"""Torch helpers shared by FlexServ's torch plugins (a library, not a plugin).

Importing it does not import torch: a plugin calls :func:`prefer_passive_openmp`
from its package ``__init__`` before any of its modules imports torch.
"""

from flexserv_torch.devices import cpu_default_dtype, cpu_has_fast_bf16, no_accelerator_for_certain, pick_device
from flexserv_torch.openmp import IntraOpThreads, full_intra_op_threads, prefer_passive_openmp, use_all_intra_op_threads

__all__ = [
    "IntraOpThreads",
    "cpu_default_dtype",
    "cpu_has_fast_bf16",
    "full_intra_op_threads",
    "no_accelerator_for_certain",
    "pick_device",
    "prefer_passive_openmp",
    "use_all_intra_op_threads",
]
