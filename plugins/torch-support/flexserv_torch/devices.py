"""Device choice and bf16 detection, shared by the torch plugins."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Mapping
from pathlib import Path


def pick_device(choice: str, *, mps: bool = True) -> str:
    """``auto`` -> ``cuda`` when available, else ``mps`` (unless the engine cannot use
    it: ``mps=False``), else ``cpu``; any other choice as given."""
    if choice != "auto":
        return choice
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if mps and getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


# oneDNN ISA names (ONEDNN_MAX_CPU_ISA, or its older spelling DNNL_MAX_CPU_ISA) that
# cap the ISA below AVX512-BF16: with one of these oneDNN runs bf16 matmuls without
# bf16 instructions, slower than float32, exactly as on a CPU that lacks them.
_ONEDNN_ISAS_WITHOUT_BF16 = frozenset(
    {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI"}
)
# ATen capabilities (ATEN_CPU_CAPABILITY) below AVX512: the vectorized kernels then
# have no bf16 paths worth using.
_ATEN_CAPABILITIES_WITHOUT_BF16 = frozenset({"default", "avx2"})


def cpu_isa_capped_below_bf16(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment caps PyTorch's CPU kernels below bf16 instructions:
    ``ATEN_CPU_CAPABILITY`` set to ``default``/``avx2``, or ``ONEDNN_MAX_CPU_ISA``
    (``DNNL_MAX_CPU_ISA``) set below ``AVX512_CORE_BF16``. PyTorch and oneDNN honour
    these variables, so a machine with AMX set up this way computes like an AVX2-only
    CPU, and the dtype choice must follow (that is how AVX2 behaviour is emulated)."""
    env = os.environ if environ is None else environ
    if env.get("ATEN_CPU_CAPABILITY", "").strip().lower() in _ATEN_CAPABILITIES_WITHOUT_BF16:
        return True
    for name in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"):
        if env.get(name, "").strip().upper() in _ONEDNN_ISAS_WITHOUT_BF16:
            return True
    return False


#: Linux's names for the CPU features PyTorch's bf16 check looks for (AMX tiles, AVX512-BF16).
_BF16_CPU_FLAGS = frozenset({"amx_tile", "avx512_bf16"})


@functools.cache
def linux_cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str] | None:
    """The CPU's feature flags as Linux reports them (the first processor's), or
    ``None`` where there is no such file. Read once (health asks on every probe)."""
    try:
        with cpuinfo.open() as lines:
            for line in lines:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        return None
    return None


def cpu_hardware_has_bf16() -> bool:
    """Whether the CPU has AMX or AVX512-BF16: from Linux's flags without importing
    torch (start-up asks before torch is loaded), else from torch's own check."""
    flags = linux_cpu_flags()
    if flags is not None:
        return bool(flags & _BF16_CPU_FLAGS)
    import torch

    checks = ("_is_amx_tile_supported", "_is_avx512_bf16_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in checks)


def cpu_has_fast_bf16() -> bool:
    """Whether the CPU has bf16 matrix instructions (AMX or AVX512-BF16) that oneDNN
    uses (:func:`cpu_hardware_has_bf16`), and the environment does not cap PyTorch
    below them (:func:`cpu_isa_capped_below_bf16`)."""
    return not cpu_isa_capped_below_bf16() and cpu_hardware_has_bf16()


def cpu_default_dtype() -> str:
    """The dtype torch plugins compute in on this CPU by default: ``bfloat16`` where it
    has fast bf16 (:func:`cpu_has_fast_bf16`), else ``float32``."""
    return "bfloat16" if cpu_has_fast_bf16() else "float32"


#: Device nodes of GPU drivers torch uses on Linux (NVIDIA's, and AMD's ROCm).
_GPU_DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd", "/dev/dxg")


def no_accelerator_for_certain() -> bool:
    """True only where ``auto`` certainly resolves to the CPU, told without importing
    torch: Linux with none of the GPU drivers' device nodes. Anywhere else (macOS's
    MPS, a GPU's nodes present) ask torch (:func:`pick_device`)."""
    return sys.platform.startswith("linux") and not any(os.path.exists(node) for node in _GPU_DEVICE_NODES)
