"""The most bytes of text one token stands for (``TextLimits.max_token_bytes``), where provable.

A prompt of ``n`` UTF-8 bytes then takes at least ``n / max_token_bytes`` tokens, so
the core refuses one far beyond the context without tokenizing it. That holds when
every byte of the text ends up in some token and no token covers more bytes than it
decodes to. :func:`max_token_bytes` answers ``None`` (tokenize everything, as
before) unless, in llama.cpp's tokenizer:

* the vocabulary is SentencePiece-style (SPM: spaces become ``▁``, which only
  grows the text; a character outside the vocabulary becomes its ``<0xXX>`` byte
  tokens) or byte-level BPE (every byte of the text is one of 256 symbols; its
  space is ``Ġ``). BPE drops a symbol it has no token for: those bytes are
  ``dropped_bytes``, which take no token (SmolLM2 drops ``\x04``, for one);
* no token strips the whitespace next to it (``LSTRIP``/``RSTRIP`` special tokens
  swallow any amount of it).

WordPiece, Unigram and the other kinds normalize text (drop or collapse
whitespace, lower-case, strip accents), so they keep full tokenization. Under those
conditions a token covers at most the bytes its piece decodes to (special tokens as
their text): an SPM token's ``▁`` stands for one space (or the prefix space the
tokenizer adds), a BPE token's symbols for one byte each.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

__all__ = ["TokenBound", "byte_level_symbols", "token_bound"]

# llama.cpp's enum values (llama.h), fixed by its C API
_VOCAB_SPM = 1
_VOCAB_BPE = 2
_ATTR_LSTRIP = 1 << 7
_ATTR_RSTRIP = 1 << 8


class Vocabulary(Protocol):
    """What this reads of a :class:`~flexserv_llamacpp.binding.LlamaRuntime`."""

    n_vocab: int

    @property
    def vocab_type(self) -> int: ...

    def token_attr(self, token: int) -> int: ...

    def piece_size(self, token: int) -> int: ...

    def token_text(self, token: int) -> str: ...

    def tokenize(self, text: str | bytes, *, add_special: bool, parse_special: bool = True) -> list[int]: ...


class TokenBound(NamedTuple):
    """``TextLimits.max_token_bytes`` and ``dropped_bytes``; ``None``: not provable."""

    max_token_bytes: int | None = None
    dropped_bytes: bytes = b""


def byte_level_symbols() -> list[str]:
    """GPT-2's byte-level alphabet: the symbol each byte 0..255 is written as (gguf's table)."""
    from gguf.vocab import bytes_to_unicode

    table = bytes_to_unicode()
    return [table[b] for b in range(256)]


def _dropped_bytes(vocab: Vocabulary) -> bytes | None:
    """The bytes a byte-level BPE vocabulary has no symbol token for; ``None`` when
    the vocabulary is not byte-level (its space is not one ``Ġ`` token)."""
    symbols = byte_level_symbols()
    space = vocab.tokenize(" ", add_special=False, parse_special=False)
    if len(space) != 1 or vocab.token_text(space[0]) != symbols[ord(" ")]:
        return None
    texts = {vocab.token_text(t) for t in range(vocab.n_vocab)}
    return bytes(b for b, symbol in enumerate(symbols) if symbol not in texts)


def token_bound(vocab: Vocabulary) -> TokenBound:
    """The most UTF-8 bytes of text one token stands for and the bytes the tokenizer
    drops, where provable (see the module docstring)."""
    kind = vocab.vocab_type
    if kind not in (_VOCAB_SPM, _VOCAB_BPE):
        return TokenBound()
    if any(vocab.token_attr(t) & (_ATTR_LSTRIP | _ATTR_RSTRIP) for t in range(vocab.n_vocab)):
        return TokenBound()
    dropped = _dropped_bytes(vocab) if kind == _VOCAB_BPE else b""
    if dropped is None:
        return TokenBound()
    widest = max((vocab.piece_size(t) for t in range(vocab.n_vocab)), default=0)
    return TokenBound(widest or None, dropped)
