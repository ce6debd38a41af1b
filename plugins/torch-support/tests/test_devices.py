"""The bf16 choice follows the CPU-capability variables PyTorch and oneDNN honour."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from flexserv_torch import cpu_has_fast_bf16, devices
from flexserv_torch.devices import cpu_isa_capped_below_bf16, linux_cpu_flags

_VARIABLES = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")


@pytest.fixture
def bf16_cpu(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """A CPU with AMX, whatever this machine has, and none of the variables set."""
    for name in _VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(devices, "cpu_hardware_has_bf16", lambda: True)
    return monkeypatch


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ATEN_CPU_CAPABILITY", "avx2"),
        ("ATEN_CPU_CAPABILITY", "default"),
        ("ONEDNN_MAX_CPU_ISA", "AVX2"),
        ("ONEDNN_MAX_CPU_ISA", "avx512_core"),
        ("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_VNNI"),
        ("DNNL_MAX_CPU_ISA", "AVX2"),
    ],
)
def test_a_cap_below_bf16_means_no_fast_bf16(bf16_cpu: pytest.MonkeyPatch, name: str, value: str) -> None:
    assert cpu_has_fast_bf16()
    bf16_cpu.setenv(name, value)
    assert cpu_isa_capped_below_bf16()
    assert not cpu_has_fast_bf16()


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ATEN_CPU_CAPABILITY", "avx512"),
        ("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16"),
        ("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_AMX"),
        ("ONEDNN_MAX_CPU_ISA", "ALL"),
        ("ONEDNN_MAX_CPU_ISA", ""),
    ],
)
def test_a_cap_at_or_above_bf16_keeps_it(bf16_cpu: pytest.MonkeyPatch, name: str, value: str) -> None:
    bf16_cpu.setenv(name, value)
    assert not cpu_isa_capped_below_bf16()
    assert cpu_has_fast_bf16()


def test_an_explicit_environment_is_read_instead_of_the_process_one() -> None:
    assert cpu_isa_capped_below_bf16({"ATEN_CPU_CAPABILITY": "AVX2"})
    assert not cpu_isa_capped_below_bf16({})


@pytest.mark.skipif(linux_cpu_flags() is None, reason="Linux reports CPU flags in /proc/cpuinfo")
def test_linux_flags_agree_with_torchs_own_check() -> None:
    checks = ("_is_amx_tile_supported", "_is_avx512_bf16_supported")
    from_torch = any(bool(getattr(torch.cpu, name, lambda: False)()) for name in checks)
    assert devices.cpu_hardware_has_bf16() == from_torch


def test_linux_flags_are_read_from_the_first_flags_line(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512_bf16\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    assert linux_cpu_flags(cpuinfo) == {"fpu", "avx2", "avx512_bf16"}
    assert linux_cpu_flags(tmp_path / "missing") is None
