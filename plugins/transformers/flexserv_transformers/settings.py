"""Settings of the transformers backend, and how ``auto`` device and dtype resolve.

Importing this module is cheap (no torch); the resolvers import torch when called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

import msgspec

from flexserv_core import UsageError
from flexserv_transformers.engine_api import DEFAULT_ENGINE, ENGINES

if TYPE_CHECKING:
    import torch

Quantization = Literal["none", "int8", "bnb-8bit", "bnb-4bit"]
DType = Literal["auto", "float32", "bfloat16", "float16"]


class TransformersSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Settings of the transformers text-generation backend."""

    device: Annotated[
        str, msgspec.Meta(description="Device for text models: auto (cuda > mps > cpu), cpu, cuda, cuda:N or mps.")
    ] = "auto"
    dtype: Annotated[
        DType,
        msgspec.Meta(
            description="Weights and compute dtype. auto: bfloat16 on CUDA with bf16 support (else float16), "
            "float16 on MPS, bfloat16 on CPUs with AMX or AVX512-BF16, else float32."
        ),
    ] = "auto"
    attn_implementation: Annotated[
        str | None,
        msgspec.Meta(description="Attention kernel passed to transformers (eager, sdpa, flash_attention_2...)."),
    ] = None
    trust_remote_code: Annotated[
        bool,
        msgspec.Meta(
            description="Run model code shipped with a checkpoint. Only for models you trust.", extra={"cli_only": True}
        ),
    ] = False
    quantization: Annotated[
        Quantization,
        msgspec.Meta(
            description="Quantize weights: none; int8 (CPU, weight-only with bf16 compute: about twice the "
            "single-stream decode speed, greedy text close to but not identical to bf16); bnb-8bit, bnb-4bit "
            "(bitsandbytes, CUDA only)."
        ),
    ] = "none"
    default_max_tokens: Annotated[
        int, msgspec.Meta(ge=1, description="Completion length limit for requests that set no max_tokens.")
    ] = 2048
    engine: Annotated[str, msgspec.Meta(description=f"Generation engine: {', '.join(ENGINES)}.")] = DEFAULT_ENGINE
    continuous_batching: Annotated[
        bool | None,
        msgspec.Meta(
            description="The FlexServ spec's spelling of the engine choice: --continuous-batching is --engine paged,"
            " --no-continuous-batching is --engine simple."
        ),
    ] = None
    warm_imports: Annotated[
        bool,
        msgspec.Meta(
            description="Import torch and transformers on a background thread as the server starts, so the "
            "first request's model load waits less for them. Off by default: on a busy 2-core machine it "
            "did not shorten the time to the first token (docs/benchmarks.md)."
        ),
    ] = False


def resolve_device(value: str) -> torch.device:
    """``auto`` -> cuda, else mps, else cpu; an explicit device must be usable here."""
    import torch

    if value == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(value)
    except (RuntimeError, ValueError):
        raise UsageError(
            f"invalid value for setting 'device' (--device): {value!r}; use auto, cpu, cuda, cuda:N or mps"
        ) from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(
                "invalid value for setting 'device' (--device): CUDA is not available on this machine (torch without CUDA or no GPU)"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise UsageError(
                f"invalid value for setting 'device' (--device): {value} does not exist ({torch.cuda.device_count()} GPU(s))"
            )
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise UsageError("invalid value for setting 'device' (--device): MPS is not available on this machine")
    elif device.type not in ("cpu", "cuda", "mps"):
        raise UsageError(
            f"invalid value for setting 'device' (--device): {value!r}; use auto, cpu, cuda, cuda:N or mps"
        )
    return device


def cpu_has_fast_bf16() -> bool:
    """Whether the CPU has bf16 matrix instructions (AMX or AVX512-BF16) that oneDNN uses."""
    import torch

    cpu = torch.cpu
    checks = ("_is_amx_tile_supported", "_is_avx512_bf16_supported")
    return any(bool(getattr(cpu, name, lambda: False)()) for name in checks)


def resolve_dtype(value: DType, device: torch.device) -> torch.dtype:
    """The torch dtype for ``value`` on ``device`` (see :class:`TransformersSettings`)."""
    import torch

    if value != "auto":
        dtype: torch.dtype = getattr(torch, value)
        if dtype is torch.float16 and device.type == "cpu":
            raise UsageError(
                "invalid value for setting 'dtype' (--dtype): float16 is not supported on CPU; use bfloat16 or float32"
            )
        return dtype
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.type == "mps":
        return torch.float16
    return torch.bfloat16 if cpu_has_fast_bf16() else torch.float32


def check_quantization(quantization: Quantization, device: torch.device, dtype: torch.dtype | None = None) -> None:
    """Raise :class:`UsageError` when ``quantization`` cannot run on ``device`` (in ``dtype``)."""
    if quantization == "none":
        return
    if quantization == "int8":
        import torch

        if device.type != "cpu":
            raise UsageError(
                f"invalid value for setting 'quantization' (--quantization int8): int8 weight-only runs on CPU, "
                f"and the device is {device.type}; use bnb-8bit on CUDA."
            )
        if dtype is not None and dtype is not torch.bfloat16:
            raise UsageError(
                "invalid value for setting 'quantization' (--quantization int8): it computes in bfloat16; "
                f"the dtype is {str(dtype).removeprefix('torch.')} (use --dtype bfloat16 or auto on a bf16 CPU)."
            )
        return
    if device.type != "cuda":
        raise UsageError(
            f"invalid value for setting 'quantization' (--quantization {quantization}): bitsandbytes quantization needs a CUDA GPU, "
            f"and the device is {device.type}. Drop --quantization (or pick --dtype bfloat16 to halve memory)."
        )
    import importlib.util

    if importlib.util.find_spec("bitsandbytes") is None:
        raise UsageError(f"--quantization {quantization} needs the bitsandbytes package: pip install bitsandbytes")


def engine_from_flag(settings: TransformersSettings, engine_given: bool) -> str:
    """The engine ``--continuous-batching`` asks for (it agrees with ``--engine`` if both are given)."""
    if settings.continuous_batching is None:
        return settings.engine
    wanted = "paged" if settings.continuous_batching else "simple"
    if engine_given and settings.engine != wanted:
        flag = "--continuous-batching" if settings.continuous_batching else "--no-continuous-batching"
        raise UsageError(f"{flag} means --engine {wanted}, but --engine {settings.engine} was given too")
    return wanted


def check_settings(settings: TransformersSettings) -> None:
    """Validate everything that can be checked before a model is loaded."""
    if settings.engine not in ENGINES:
        raise UsageError(
            f"invalid value for setting 'engine' (--engine): {settings.engine!r}; choose one of {', '.join(ENGINES)}"
        )
    if settings.device == "auto" and settings.dtype != "float16" and settings.quantization == "none":
        return  # nothing to check that needs torch: keep its import off the start-up path
    device = resolve_device(settings.device)
    dtype = resolve_dtype(settings.dtype, device)
    check_quantization(settings.quantization, device, dtype)
