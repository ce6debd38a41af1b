"""What a GGUF file says about itself, read without loading its weights: the
trained context, the KV-cache geometry (so the cache's size is known before
loading) and the chat template."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flexserv_core import ModelLoadError

#: Bytes of one KV-cache element: llama.cpp's default cache type is f16.
KV_ELEMENT_BYTES = 2


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
    def kv_bytes_per_token(self) -> int:
        """Bytes one token takes in the KV cache (keys and values of every layer)."""
        return self.n_layers * self.n_kv_heads * (self.key_length + self.value_length) * KV_ELEMENT_BYTES


def _value(field: Any) -> Any:
    contents = getattr(field, "contents", None)
    if callable(contents):
        return contents()
    part = field.parts[field.data[0]]
    return bytes(part).decode() if part.dtype.kind == "u" and part.itemsize == 1 else part[0]


def read_gguf_info(path: Path) -> GgufInfo:
    """The metadata of the GGUF at ``path``; a :class:`ModelLoadError` if it is not one."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(str(path), "r")
    except Exception as exc:
        raise ModelLoadError(f"{path.name} is not a readable GGUF file: {exc}", param="model") from exc
    fields = reader.fields

    def get(key: str, default: Any = None) -> Any:
        field = fields.get(key)
        return _value(field) if field is not None else default

    arch = str(get("general.architecture", ""))
    if not arch:
        raise ModelLoadError(f"{path.name} has no general.architecture: not a model GGUF.", param="model")
    n_heads = int(get(f"{arch}.attention.head_count", 0) or 0)
    embedding = int(get(f"{arch}.embedding_length", 0) or 0)
    head_dim = embedding // n_heads if n_heads else 0
    template = get("tokenizer.chat_template")
    return GgufInfo(
        path=path,
        architecture=arch,
        context_length=int(get(f"{arch}.context_length", 0) or 0),
        n_layers=int(get(f"{arch}.block_count", 0) or 0),
        n_kv_heads=int(get(f"{arch}.attention.head_count_kv", n_heads) or n_heads),
        key_length=int(get(f"{arch}.attention.key_length", head_dim) or head_dim),
        value_length=int(get(f"{arch}.attention.value_length", head_dim) or head_dim),
        chat_template=str(template) if template else None,
        file_size=path.stat().st_size,
    )
