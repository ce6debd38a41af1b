"""A model's vocabulary as the constraint service sees it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from flexserv_core.errors import InvalidRequest

if TYPE_CHECKING:
    import llguidance

    from flexserv_core.constraints.compiler import ConstraintCompiler


class _TokenList:
    """The shape llguidance's ``TokenizerWrapper`` reads from a tokenizer."""

    def __init__(
        self,
        tokens: Sequence[bytes],
        encode: Callable[[bytes], list[int]],
        eos_token_id: int,
        bos_token_id: int | None,
        special_token_ids: Sequence[int],
    ) -> None:
        self.tokens = tokens
        self.eos_token_id = eos_token_id
        self.bos_token_id = bos_token_id
        self.special_token_ids = list(special_token_ids)
        self._encode = encode

    def __call__(self, text: bytes) -> list[int]:
        return self._encode(text)


class ConstraintVocabulary:
    """What the platform needs of a model's tokenizer to enforce constraints.

    Build it with one of the two constructors when the model loads (cheap: the
    library's view of the vocabulary is made on the first constrained request) and
    set it as the model's :attr:`~flexserv_core.TextGenerationModel.constraint_vocabulary`.
    ``vocab_size`` is the width of the model's logits (masks have that many columns;
    ids beyond the tokenizer's own vocabulary are always blocked).
    """

    def __init__(self, build: Callable[[], llguidance.LLTokenizer], vocab_size: int, eos_token_ids: Sequence[int]):
        self.vocab_size = vocab_size
        self.eos_token_ids = sorted(set(eos_token_ids))
        self._build = build
        self._tokenizer: llguidance.LLTokenizer | None = None
        self._compiler: ConstraintCompiler | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_tokenizer_json(
        cls, tokenizer_json: str | Callable[[], str], *, vocab_size: int, eos_token_ids: Sequence[int]
    ) -> ConstraintVocabulary:
        """From a Hugging Face ``tokenizer.json`` text (or a callable returning it,
        called once on first use): what a fast tokenizer's ``backend_tokenizer.to_str()`` gives."""

        def build() -> llguidance.LLTokenizer:
            import llguidance

            text = tokenizer_json() if callable(tokenizer_json) else tokenizer_json
            return llguidance.LLTokenizer(text, n_vocab=vocab_size, eos_token=list(eos_token_ids) or None)

        return cls(build, vocab_size, eos_token_ids)

    @classmethod
    def from_tokens(
        cls,
        tokens: Sequence[bytes] | Callable[[], Sequence[bytes]],
        *,
        encode: Callable[[bytes], list[int]],
        eos_token_ids: Sequence[int],
        bos_token_id: int | None = None,
        special_token_ids: Sequence[int] = (),
        vocab_size: int | None = None,
    ) -> ConstraintVocabulary:
        """From every token's bytes, in id order (special tokens as their text), and the
        model's tokenizer (``encode``: UTF-8 bytes -> ids, without special tokens): what
        a backend with its own tokenizer (llama.cpp) can give."""
        if not eos_token_ids:
            raise ValueError("a constraint vocabulary needs the model's end-of-sequence token id(s)")

        def build() -> llguidance.LLTokenizer:
            import llguidance

            listed = tokens() if callable(tokens) else tokens
            wrapper = llguidance.TokenizerWrapper(
                _TokenList(listed, encode, eos_token_ids[0], bos_token_id, special_token_ids)
            )
            return llguidance.LLTokenizer(wrapper, n_vocab=vocab_size, eos_token=list(eos_token_ids))

        width = vocab_size if vocab_size is not None else (len(tokens) if not callable(tokens) else 0)
        if width < 1:
            raise ValueError("vocab_size is needed when tokens is a callable")
        return cls(build, width, eos_token_ids)

    @property
    def tokenizer(self) -> llguidance.LLTokenizer:
        """The library's view of the vocabulary, built on first use (~0.5 s for 49k tokens)."""
        with self._lock:
            if self._tokenizer is None:
                try:
                    self._tokenizer = self._build()
                except Exception as exc:
                    raise InvalidRequest(
                        f"This model's tokenizer cannot be used for constrained decoding: {exc}",
                        param="response_format",
                        code="constraints_not_supported",
                    ) from exc
            return self._tokenizer

    @property
    def compiler(self) -> ConstraintCompiler:
        """The vocabulary's compiler and its cache of compiled grammars."""
        with self._lock:
            if self._compiler is None:
                from flexserv_core.constraints.compiler import ConstraintCompiler

                self._compiler = ConstraintCompiler(self)
            return self._compiler

    def describe(self) -> dict[str, Any]:
        return {"vocab_size": self.vocab_size, "eos_token_ids": self.eos_token_ids}
