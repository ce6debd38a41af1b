"""Device choice and bf16 detection, shared by the torch plugins."""

from __future__ import annotations


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


def cpu_has_fast_bf16() -> bool:
    """Whether the CPU has bf16 matrix instructions (AMX or AVX512-BF16) that oneDNN uses."""
    import torch

    checks = ("_is_amx_tile_supported", "_is_avx512_bf16_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in checks)
