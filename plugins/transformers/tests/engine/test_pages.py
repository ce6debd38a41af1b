"""The KV pool's memory is advised against transparent huge pages (Linux)."""

from __future__ import annotations

import mmap
import sys
from pathlib import Path

import pytest
import torch
from flexserv_transformers.engine.pages import no_huge_pages


def vm_flags(address: int) -> list[str]:
    """The ``VmFlags`` of the mapping of this process that holds ``address``."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split(" ", 1)[0]
        if "-" in head and not head.endswith(":"):
            start, end = (int(v, 16) for v in head.split("-"))
            inside = start <= address < end
        elif inside and line.startswith("VmFlags:"):
            return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise and /proc/self/smaps are Linux's")
def test_a_large_cpu_tensor_is_marked_no_huge_pages() -> None:
    # a fresh mapping of its own: torch.empty may reuse memory an earlier test's KV
    # pool had already advised, and then the "before" check would see its flag
    memory = mmap.mmap(-1, 64 * 2**20)
    tensor = torch.frombuffer(memory, dtype=torch.uint8)
    inner = -(-tensor.data_ptr() // mmap.PAGESIZE) * mmap.PAGESIZE
    assert "nh" not in vm_flags(inner)
    assert no_huge_pages(tensor)
    assert "nh" in vm_flags(inner)


def test_a_tensor_smaller_than_a_page_is_left_alone() -> None:
    assert not no_huge_pages(torch.empty(16, dtype=torch.uint8))
