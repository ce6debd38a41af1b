"""The most bytes of text one token stands for (``TextLimits.max_token_bytes``), where provable.

A prompt of ``n`` UTF-8 bytes then takes at least ``n / max_token_bytes`` tokens, so
the core refuses one far beyond the context without tokenizing it. That holds only
when every byte of the text ends up in some token, each token covering at most that
many bytes. :func:`max_token_bytes` reads the tokenizer's pipeline
(``tokenizer.json``) and answers ``None`` (tokenize everything, as before) unless:

* the Rust pipeline is all that encodes text (:class:`FastTokenizer`, or
  transformers' ``TokenizersBackend`` with its own encode methods);
* the normalizer never turns text into fewer bytes: none, or only ``Prepend`` and
  ``Replace`` of a string by one at least as long (Unicode normalization, lower
  casing and stripping can shrink text, and are refused);
* the pre-tokenizer drops nothing (``Whitespace``, ``BertPreTokenizer``,
  ``CharDelimiterSplit`` and ``Split`` with ``Removed`` drop what they split on);
* the model is BPE without subword prefixes or suffixes, and no run of unknown
  text can become one token: a symbol outside a byte-level vocabulary is dropped
  (its byte is then one of ``dropped_bytes``, which take no token) or becomes an
  unfused unknown token; outside other vocabularies a character needs byte
  fallback with all 256 ``<0xXX>`` tokens, or an unfused unknown token (one
  character, at most 4 bytes);
* no added token strips the whitespace next to it (``lstrip``/``rstrip``, which
  would let one token swallow any amount of it).

Under those, a vocabulary token covers as many input bytes as its text has symbols
(byte-level) or at most its text's UTF-8 bytes (the normalized text is no shorter
than the input), and an added token its content's bytes. (A byte-level vocabulary
often lacks some control characters' symbols: SmolLM2's drops ``\x04``.)
"""

from __future__ import annotations

import json
import sys
from typing import Any, NamedTuple

from flexserv_transformers.fast_tokenizer import FastTokenizer

__all__ = ["TokenBound", "byte_level_symbols", "token_bound"]

#: Pre-tokenizers that keep every character (``Split``/``Punctuation`` unless ``Removed``).
_KEEPING_PRE_TOKENIZERS = frozenset({"ByteLevel", "Metaspace", "Digits", "UnicodeScripts", "Split", "Punctuation"})
#: The most UTF-8 bytes of one character (what an unfused unknown token stands for).
_MAX_CHAR_BYTES = 4


def _parts(config: dict[str, Any] | None, key: str) -> list[dict[str, Any]]:
    """A normalizer or pre-tokenizer as its components (a ``Sequence`` unrolled)."""
    if config is None:
        return []
    if config.get("type") == "Sequence":
        return [part for item in config.get(key, []) for part in _parts(item, key)]
    return [config]


def _never_shrinks(normalizer: dict[str, Any]) -> bool:
    kind = normalizer.get("type")
    if kind == "Prepend":
        return True
    if kind == "Replace":
        pattern = normalizer.get("pattern", {}).get("String")
        content = normalizer.get("content", "")
        return isinstance(pattern, str) and len(content.encode()) >= len(pattern.encode())
    return False


def _keeps_text(pre_tokenizer: dict[str, Any]) -> bool:
    return pre_tokenizer.get("type") in _KEEPING_PRE_TOKENIZERS and pre_tokenizer.get("behavior") != "Removed"


class TokenBound(NamedTuple):
    """``TextLimits.max_token_bytes`` and ``dropped_bytes``; ``None``: not provable."""

    max_token_bytes: int | None = None
    dropped_bytes: bytes = b""


def byte_level_symbols() -> list[str]:
    """GPT-2's byte-level alphabet: the symbol each byte 0..255 is written as (gguf's table)."""
    from gguf.vocab import bytes_to_unicode

    table = bytes_to_unicode()
    return [table[b] for b in range(256)]


def _unknown(model: dict[str, Any], byte_level: bool) -> tuple[int, bytes] | None:
    """What text outside the vocabulary costs: the most bytes one token then covers,
    and the bytes dropped; ``None`` when a run of it could become one token."""
    vocab = model["vocab"]
    unk = model.get("unk_token")
    unfused_unk = unk is not None and unk in vocab and not model.get("fuse_unk")
    if byte_level:
        missing = bytes(b for b, symbol in enumerate(byte_level_symbols()) if symbol not in vocab)
        if not missing:
            return 0, b""
        if unfused_unk:
            return 1, b""
        return (0, missing) if unk is None else None
    if model.get("byte_fallback") and all(f"<0x{b:02X}>" in vocab for b in range(256)):
        return 0, b""
    return (_MAX_CHAR_BYTES, b"") if unfused_unk else None


def _bound(config: dict[str, Any]) -> TokenBound:
    model = config.get("model") or {}
    if model.get("type") != "BPE" or model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        return TokenBound()
    if not all(_never_shrinks(n) for n in _parts(config.get("normalizer"), "normalizers")):
        return TokenBound()
    pre_tokenizers = _parts(config.get("pre_tokenizer"), "pretokenizers")
    if not all(_keeps_text(p) for p in pre_tokenizers):
        return TokenBound()
    added = config.get("added_tokens", [])
    if any(token.get("lstrip") or token.get("rstrip") for token in added):
        return TokenBound()
    byte_level = any(p.get("type") == "ByteLevel" for p in pre_tokenizers)
    unknown = _unknown(model, byte_level)
    if unknown is None:
        return TokenBound()
    covered = (len(t) if byte_level else len(t.encode()) for t in model["vocab"])
    widest = max(unknown[0], max(covered, default=0), *(len(token["content"].encode()) for token in added))
    return TokenBound(widest or None, unknown[1])


def _encodes_with_backend(tokenizer: object) -> bool:
    """Whether ``tokenizer(text)`` is its Rust pipeline's encode, with no Python step
    that could change the text (a transformers subclass may override encoding)."""
    if type(tokenizer) is FastTokenizer:
        return True
    module = sys.modules.get("transformers.tokenization_utils_tokenizers")
    base = getattr(module, "TokenizersBackend", None)
    if base is None or not isinstance(tokenizer, base):
        return False
    cls = type(tokenizer)
    return all(getattr(cls, name) is getattr(base, name) for name in ("__call__", "_encode_plus"))


def token_bound(tokenizer: object) -> TokenBound:
    """The most UTF-8 bytes of text one token of ``tokenizer`` stands for and the bytes
    it drops, where provable (see the module docstring)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not _encodes_with_backend(tokenizer):
        return TokenBound()
    return _bound(json.loads(backend.to_str()))
