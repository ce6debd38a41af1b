"""What a GGUF file says about itself, read without loading its weights: the
trained context, the KV-cache geometry (so the cache's size is known before
loading) and the chat template."""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass
from pathlib import Path

from flexserv_core import ModelLoadError


@dataclass(frozen=True)
class GgufInfo:
    path: Path
    architecture: str
    context_length: int
    n_layers: int
    n_kv_heads: int
    key_length: int
    value_length: int
    chat_template: str | None
    file_size: int

    @property
    def kv_values_per_token(self) -> int:
        """Values one token adds to the KV cache (keys and values of every layer)."""
        return self.n_layers * self.n_kv_heads * (self.key_length + self.value_length)


#: Room for one metadata value as text (a chat template can be tens of kilobytes).
_VALUE_BYTES = 1 << 20


def _metadata(path: Path) -> dict[str, str]:
    """The GGUF's scalar metadata keys as llama.cpp renders them (numbers as text),
    read by llama.cpp itself with ``vocab_only``: the header and the vocabulary, no
    weights. 50 ms for SmolLM2, where gguf's Python ``GGUFReader`` took 1.9 s building
    an object per vocabulary entry. Array-valued keys are absent: llama.cpp's model
    metadata leaves them out (``llama_model::load_hparams``), so a per-layer array
    (e.g. ``head_count_kv`` of some architectures) reads as a missing key here."""
    from flexserv_llamacpp.binding import _llama

    llama = _llama()
    params = llama.llama_model_default_params()
    params.vocab_only = True
    params.n_gpu_layers = 0
    model = llama.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        raise ModelLoadError(f"{path.name} is not a readable GGUF file (see the log for why).", param="model")
    try:
        key = ctypes.create_string_buffer(1024)
        value = ctypes.create_string_buffer(_VALUE_BYTES)
        found: dict[str, str] = {}
        for i in range(int(llama.llama_model_meta_count(model))):
            if llama.llama_model_meta_key_by_index(model, i, key, len(key)) < 0:
                continue
            if llama.llama_model_meta_val_str_by_index(model, i, value, len(value)) < 0:
                continue
            found[key.value.decode(errors="replace")] = value.value.decode(errors="replace")
        return found
    finally:
        llama.llama_model_free(model)


def _int(text: str | None, default: int = 0) -> int:
    """A metadata number; of a per-layer array, the largest (the KV cache is sized for it)."""
    if not text:
        return default
    numbers = [int(n) for n in re.findall(r"-?\d+", text)] if text.startswith("[") else [int(float(text))]
    return max(numbers, default=default)


def _with_gguf_reader(path: Path, keys: list[str]) -> dict[str, str]:
    """``keys`` read with gguf's Python reader (slow: 1.9 s for SmolLM2), arrays
    rendered ``[a, b, ...]``: for the keys llama.cpp's metadata leaves out."""
    from gguf import GGUFReader

    fields = GGUFReader(str(path), "r").fields
    found: dict[str, str] = {}
    for key in keys:
        field = fields.get(key)
        if field is not None:
            value = field.contents()
            found[key] = f"[{', '.join(map(str, value))}]" if isinstance(value, list) else str(value)
    return found


def read_gguf_info(path: Path) -> GgufInfo:
    """The metadata of the GGUF at ``path``; a :class:`ModelLoadError` if it is not one.

    The KV-cache geometry must be right (the memory check sizes the cache from it):
    a geometry key llama.cpp's metadata lacks, an array such as per-layer head counts,
    is read again with gguf's reader."""
    meta = _metadata(path)
    arch = meta.get("general.architecture", "")
    if not arch:
        raise ModelLoadError(f"{path.name} has no general.architecture: not a model GGUF.", param="model")
    geometry = [f"{arch}.{key}" for key in ("block_count", "embedding_length", "attention.head_count")]
    geometry.append(f"{arch}.attention.head_count_kv")
    if missing := [key for key in geometry if key not in meta]:
        meta.update(_with_gguf_reader(path, missing))
    n_heads = _int(meta.get(f"{arch}.attention.head_count"))
    embedding = _int(meta.get(f"{arch}.embedding_length"))
    head_dim = embedding // n_heads if n_heads else 0
    return GgufInfo(
        path=path,
        architecture=arch,
        context_length=_int(meta.get(f"{arch}.context_length")),
        n_layers=_int(meta.get(f"{arch}.block_count")),
        n_kv_heads=_int(meta.get(f"{arch}.attention.head_count_kv"), n_heads) or n_heads,
        key_length=_int(meta.get(f"{arch}.attention.key_length"), head_dim) or head_dim,
        value_length=_int(meta.get(f"{arch}.attention.value_length"), head_dim) or head_dim,
        chat_template=meta.get("tokenizer.chat_template") or None,
        file_size=path.stat().st_size,
    )
