"""The ``sentence-transformers`` embedding backend."""

from __future__ import annotations

import logging
from typing import Any

from flexserv_torch import cpu_default_dtype, import_reporting, pick_device

from flexserv_core import Backend, LoadedModel, ModelKind, ModelLoadError, ModelSpec, ProgressCallback
from flexserv_sentence_transformers.settings import SentenceTransformersSettings

log = logging.getLogger(__name__)


def pick_dtype(choice: str, device: str) -> str:
    """The dtype to run in: ``auto`` is bfloat16 on a bf16-capable CPU, float32 elsewhere.

    On such a CPU (AVX512-BF16 here) a batch of 32 sentences through all-MiniLM-L6-v2
    ran 6-9x faster in bf16; its vectors keep a cosine of >= 0.9999 to float32's
    (``docs/benchmarks.md``). GPUs stay in float32 until measured.
    """
    if choice != "auto":
        return choice
    return cpu_default_dtype() if device == "cpu" else "float32"


def pick_quantization(choice: str, dtype_choice: str, device: str) -> str:
    """``none`` or ``int8``: ``auto`` is ``int8`` only where the dtype is left to ``auto``
    and ``auto`` picks float32 on the CPU (no AMX or AVX512-BF16, or an environment that
    caps torch below them) and torch has the x86 int8 kernels; else ``none``.

    There, on all-MiniLM-L6-v2, the int8 forward took 1.9x less CPU per input than
    float32's, with vectors at a cosine of >= 0.957 (mean 0.991) to float32's and the
    same nearest neighbours (``docs/benchmarks.md``). bf16 CPUs keep bf16 (cosine >= 0.9999);
    an explicit ``--sentence-transformers-dtype float32`` keeps float32 weights.
    """
    if choice != "auto":
        return choice
    if dtype_choice != "auto" or device != "cpu" or pick_dtype("auto", device) != "float32":
        return "none"
    from flexserv_sentence_transformers.int8 import int8_supported

    return "int8" if int8_supported() else "none"


def pick_precision(dtype_choice: str, quantization_choice: str, device: str) -> tuple[str, str]:
    """``(dtype, quantization)`` the settings mean on ``device``: int8 multiplies
    float32 activations, so its dtype is float32 unless one is asked for."""
    quantization = pick_quantization(quantization_choice, dtype_choice, device)
    if quantization == "int8" and dtype_choice == "auto":
        return "float32", quantization
    return pick_dtype(dtype_choice, device), quantization


def matryoshka_of(spec: ModelSpec, config: Any, dimensions: int) -> tuple[bool, tuple[int, ...] | None]:
    """Whether a request's ``dimensions`` may cut the model's vectors, and to which sizes
    (``None``: any): the model's ``matryoshka_dimensions`` option (a list of sizes, or
    ``true`` for any), else what its Hugging Face config says (``matryoshka_dimensions``
    or ``is_matryoshka``, as vLLM reads them). Nothing says it: not Matryoshka."""
    declared = spec.options.get("matryoshka_dimensions")
    if declared is None:
        declared = getattr(config, "matryoshka_dimensions", None)
        if declared is None:
            return getattr(config, "is_matryoshka", None) is True, None
    if isinstance(declared, bool):
        return declared, None
    if (
        isinstance(declared, list | tuple)
        and declared
        and all(isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= dimensions for n in declared)
    ):
        return True, tuple(sorted(set(declared)))
    raise ModelLoadError(
        f"Embedding model '{spec.name}': matryoshka_dimensions must be true, false or a list of sizes from 1 to "
        f"{dimensions}, not {declared!r}."
    )


class SentenceTransformersBackend(Backend):
    name = "sentence-transformers"
    kind = ModelKind.EMBEDDING

    def __init__(self, settings: SentenceTransformersSettings) -> None:
        self.settings = settings

    def accepts(self, spec: ModelSpec) -> bool:
        """Any Hub id or local directory (sentence-transformers wraps plain
        transformers encoders too); not URLs of other schemes."""
        return "://" not in spec.source

    def load(self, spec: ModelSpec, progress: ProgressCallback) -> LoadedModel:
        import_reporting(progress, "torch", "sentence_transformers")
        import torch
        from sentence_transformers import SentenceTransformer

        from flexserv_sentence_transformers.model import SentenceTransformerEmbeddingModel

        settings = self.settings
        device = pick_device(settings.sentence_transformers_device)
        dtype, quantization = pick_precision(
            settings.sentence_transformers_dtype, settings.sentence_transformers_quantization, device
        )
        if quantization == "int8":
            self._check_int8(spec, device, dtype)
        if dtype == "float16" and device == "cpu":
            raise ModelLoadError(
                f"Embedding model '{spec.name}': float16 is not supported on CPU "
                "(--sentence-transformers-dtype); use bfloat16 or float32."
            )
        label = "dynamic int8, float32 activations" if quantization == "int8" else dtype
        progress(f"loading sentence-transformers model from {spec.source} on {device} ({label})", None)
        try:
            st = SentenceTransformer(
                spec.source, device=device, trust_remote_code=False, model_kwargs={"dtype": getattr(torch, dtype)}
            )
        except Exception as exc:
            raise ModelLoadError(
                f"Could not load embedding model '{spec.name}' from {spec.source!r} with sentence-transformers: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        st.eval()
        if quantization == "int8":
            from flexserv_sentence_transformers.int8 import quantize_linears

            replaced = quantize_linears(st)
            log.info("embedding model %s: %d linear layers as dynamic int8", spec.name, replaced)
        model = SentenceTransformerEmbeddingModel(
            spec,
            st,
            device=device,
            quantization=quantization,
            max_batch=self.settings.sentence_transformers_max_batch,
            max_wait=self.settings.sentence_transformers_max_wait_ms / 1000,
            gather_wait=self.settings.sentence_transformers_gather_wait_ms / 1000,
            forward_batch=self.settings.sentence_transformers_forward_batch,
            single_thread_tokens=self.settings.sentence_transformers_single_thread_tokens if device == "cpu" else 0,
        )
        try:
            model.is_matryoshka, model.matryoshka_dimensions = matryoshka_of(spec, _hf_config(st), model.dimensions)
        except ModelLoadError:
            model.unload()
            raise
        return model

    @staticmethod
    def _check_int8(spec: ModelSpec, device: str, dtype: str) -> None:
        from flexserv_sentence_transformers.int8 import int8_supported

        where = f"Embedding model '{spec.name}': --sentence-transformers-quantization int8"
        if device != "cpu":
            raise ModelLoadError(f"{where} runs on the CPU only, and the device is {device}.")
        if dtype != "float32":
            raise ModelLoadError(f"{where} computes in float32; drop --sentence-transformers-dtype {dtype}.")
        if not int8_supported():
            raise ModelLoadError(f"{where} needs torch's x86 int8 kernels (fbgemm), which this torch lacks.")


def _hf_config(st: Any) -> Any:
    """The Hugging Face config of the model's transformer module (``None`` if it has none)."""
    first = st[0] if len(st) else None
    return getattr(getattr(first, "auto_model", None), "config", None)
