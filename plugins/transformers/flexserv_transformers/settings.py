"""Settings of the transformers backend, and how ``auto`` device and dtype resolve.

Importing this module is cheap (no torch); the resolvers import torch when called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

import flexserv_torch
import msgspec
from flexserv_torch import cpu_default_dtype, no_accelerator_for_certain

from flexserv_core import UsageError
from flexserv_transformers.engine_api import DEFAULT_ENGINE, ENGINES

if TYPE_CHECKING:
    import torch

Quantization = Literal["none", "int8", "bnb-8bit", "bnb-4bit"]
DType = Literal["auto", "float32", "bfloat16", "float16"]
ModelCode = Literal["auto", "flexserv", "transformers"]


def _meta(description: str, *, aliases: tuple[str, ...] = (), **extra: object) -> msgspec.Meta:
    """A setting's description; ``aliases`` keep the spellings the FlexServ spec
    documents (``--device``...) working next to the prefixed names."""
    if aliases:
        extra["aliases"] = list(aliases)
    return msgspec.Meta(description=description, extra=extra or None)


class TransformersSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Settings of the transformers text-generation backend."""

    transformers_device: Annotated[
        str,
        _meta(
            "Device for text models: auto (cuda > mps > cpu), cpu, cuda, cuda:N or mps.",
            aliases=("device",),
            metavar="DEVICE",
        ),
    ] = "auto"
    transformers_dtype: Annotated[
        DType,
        _meta(
            "Weights and compute dtype. auto: bfloat16 on CUDA with bf16 support (else float16), "
            "float16 on MPS, bfloat16 on CPUs with AMX or AVX512-BF16, else float32 (also when "
            "ATEN_CPU_CAPABILITY=avx2/default or ONEDNN_MAX_CPU_ISA below AVX512_CORE_BF16 caps PyTorch's kernels).",
            aliases=("dtype",),
        ),
    ] = "auto"
    transformers_attn_implementation: Annotated[
        str | None,
        _meta(
            "Attention kernel passed to transformers (eager, sdpa, flash_attention_2...).",
            aliases=("attn_implementation",),
            metavar="KERNEL",
        ),
    ] = None
    transformers_trust_remote_code: Annotated[
        bool,
        _meta(
            "Run model code shipped with a checkpoint. Only for models you trust.",
            aliases=("trust_remote_code",),
            cli_only=True,
        ),
    ] = False
    transformers_quantization: Annotated[
        Quantization,
        _meta(
            "Quantize weights: none; int8 (CPU: in bfloat16 weight-only, about twice the single-stream decode "
            "speed; in float32 weights and activations on fbgemm's x86 kernels, each activation row with its own "
            "scale, 2-3x float32's speed, log-likelihood ~1.3% worse, speculative drafts verified bit-exactly; text "
            "close to but not identical to unquantized); bnb-8bit, bnb-4bit (bitsandbytes, CUDA only).",
            aliases=("quantization",),
        ),
    ] = "none"
    transformers_default_max_tokens: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            description="Completion length limit for requests that set no max_tokens.",
            extra={"aliases": ["default_max_tokens"]},
        ),
    ] = 2048
    transformers_max_images: Annotated[
        int,
        msgspec.Meta(
            ge=1, description="Most images one chat request may carry to a vision-language model (400 beyond)."
        ),
    ] = 8
    transformers_engine: Annotated[str, _meta("Generation engine.", metavar="{" + ",".join(ENGINES) + "}")] = (
        DEFAULT_ENGINE
    )
    transformers_model_code: Annotated[
        ModelCode,
        _meta(
            "Whose forward pass runs the model. flexserv: FlexServ's own Llama forward (paged engine, plain Llama"
            " checkpoints in a local directory or GGUF file; transformers' logits within rounding, faster start,"
            " less memory); an unsupported model is a load error. transformers: transformers' modelling code."
            " auto: flexserv where it applies on the CPU, else transformers."
        ),
    ] = "auto"
    transformers_continuous_batching: Annotated[
        bool | None,
        _meta(
            "The FlexServ spec's spelling of the engine choice: --continuous-batching is --transformers-engine"
            " paged, --no-continuous-batching is --transformers-engine simple.",
            aliases=("continuous_batching",),
        ),
    ] = None
    transformers_warm_imports: Annotated[
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
            f"invalid value for setting 'transformers_device' (--transformers-device): {value!r}; use auto, cpu, cuda, cuda:N or mps"
        ) from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(
                "invalid value for setting 'transformers_device' (--transformers-device): CUDA is not available on this machine (torch without CUDA or no GPU)"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise UsageError(
                f"invalid value for setting 'transformers_device' (--transformers-device): {value} does not exist ({torch.cuda.device_count()} GPU(s))"
            )
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise UsageError(
            "invalid value for setting 'transformers_device' (--transformers-device): MPS is not available on this machine"
        )
    elif device.type not in ("cpu", "cuda", "mps"):
        raise UsageError(
            f"invalid value for setting 'transformers_device' (--transformers-device): {value!r}; use auto, cpu, cuda, cuda:N or mps"
        )
    return device


def cpu_placement_without_torch(settings: TransformersSettings) -> tuple[str, str] | None:
    """``("cpu", dtype name)`` when the settings certainly place models on the CPU,
    told without importing torch (the backend's choice at start-up asks before torch
    is loaded); ``None`` where only torch can tell (:func:`resolve_device`)."""
    device = settings.transformers_device
    if device != "cpu" and not (device == "auto" and no_accelerator_for_certain()):
        return None
    dtype = settings.transformers_dtype
    return "cpu", cpu_default_dtype() if dtype == "auto" else dtype


def resolve_dtype(value: DType, device: torch.device) -> torch.dtype:
    """The torch dtype for ``value`` on ``device`` (see :class:`TransformersSettings`)."""
    import torch

    if value != "auto":
        dtype: torch.dtype = getattr(torch, value)
        if dtype is torch.float16 and device.type == "cpu":
            raise UsageError(
                "invalid value for setting 'transformers_dtype' (--transformers-dtype): float16 is not supported on CPU; use bfloat16 or float32"
            )
        return dtype
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.type == "mps":
        return torch.float16
    cpu_dtype: torch.dtype = getattr(torch, cpu_default_dtype())
    return cpu_dtype


def check_quantization(quantization: Quantization, device: torch.device, dtype: torch.dtype | None = None) -> None:
    """Raise :class:`UsageError` when ``quantization`` cannot run on ``device`` (in ``dtype``)."""
    if quantization == "none":
        return
    if quantization == "int8":
        import torch

        if device.type != "cpu":
            raise UsageError(
                "invalid value for setting 'transformers_quantization' (--transformers-quantization int8): int8 "
                f"weight-only runs on CPU, and the device is {device.type}; use bnb-8bit on CUDA."
            )
        if dtype is not None and dtype not in (torch.bfloat16, torch.float32):
            raise UsageError(
                "invalid value for setting 'transformers_quantization' (--transformers-quantization int8): it "
                f"computes in bfloat16 or float32; the dtype is {str(dtype).removeprefix('torch.')}."
            )
        if dtype is torch.float32 and not flexserv_torch.fbgemm_available():
            raise UsageError(
                "invalid value for setting 'transformers_quantization' (--transformers-quantization int8): in "
                "float32 it runs on fbgemm's x86 int8 kernels, which this torch lacks."
            )
        return
    if device.type != "cuda":
        raise UsageError(
            f"invalid value for setting 'transformers_quantization' (--transformers-quantization {quantization}): bitsandbytes quantization needs a CUDA GPU, "
            f"and the device is {device.type}. Drop --transformers-quantization (or pick --transformers-dtype bfloat16 to halve memory)."
        )
    import importlib.util

    if importlib.util.find_spec("bitsandbytes") is None:
        raise UsageError(
            f"--transformers-quantization {quantization} needs the bitsandbytes package: pip install bitsandbytes"
        )


def engine_from_flag(settings: TransformersSettings, engine_given: bool) -> str:
    """The engine ``--continuous-batching`` asks for (it agrees with ``--transformers-engine`` if both are given)."""
    if settings.transformers_continuous_batching is None:
        return settings.transformers_engine
    wanted = "paged" if settings.transformers_continuous_batching else "simple"
    if engine_given and settings.transformers_engine != wanted:
        flag = "--continuous-batching" if settings.transformers_continuous_batching else "--no-continuous-batching"
        raise UsageError(
            f"{flag} means --transformers-engine {wanted}, but --transformers-engine"
            f" {settings.transformers_engine} was given too"
        )
    return wanted


def check_settings(settings: TransformersSettings) -> None:
    """Validate everything that can be checked before a model is loaded."""
    if settings.transformers_engine not in ENGINES:
        raise UsageError(
            "invalid value for setting 'transformers_engine' (--transformers-engine):"
            f" {settings.transformers_engine!r}; choose one of {', '.join(ENGINES)}"
        )
    if settings.transformers_model_code == "flexserv" and settings.transformers_engine != "paged":
        raise UsageError(
            "invalid value for setting 'transformers_model_code' (--transformers-model-code flexserv): FlexServ's"
            f" forward runs in the paged engine, and the engine is {settings.transformers_engine}"
        )
    if (
        settings.transformers_device == "auto"
        and settings.transformers_dtype != "float16"
        and settings.transformers_quantization == "none"
    ):
        return  # nothing to check that needs torch: keep its import off the start-up path
    device = resolve_device(settings.transformers_device)
    dtype = resolve_dtype(settings.transformers_dtype, device)
    check_quantization(settings.transformers_quantization, device, dtype)
