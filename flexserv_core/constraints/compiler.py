"""Compiling constraints for one vocabulary, with a cache shared by every request."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

from flexserv_core.backends.base import Constraint
from flexserv_core.constraints.grammar import constraint_grammar, describe
from flexserv_core.constraints.matcher import TokenMatcher
from flexserv_core.errors import InvalidRequest

if TYPE_CHECKING:
    from flexserv_core.constraints.vocabulary import ConstraintVocabulary

#: Compiled grammars kept per vocabulary (grammar text is small; matchers are per sequence).
CACHE_SIZE = 256


class CompiledConstraint:
    """A validated grammar for one vocabulary: :meth:`matcher` gives each sequence its own."""

    __slots__ = ("constraint", "grammar", "vocabulary")

    def __init__(self, constraint: Constraint, grammar: str, vocabulary: ConstraintVocabulary) -> None:
        self.constraint = constraint
        self.grammar = grammar
        self.vocabulary = vocabulary

    def matcher(self) -> TokenMatcher:
        """A fresh matcher at the start of the output (cheap: the grammar is compiled)."""
        from llguidance import LLMatcher

        vocab = self.vocabulary
        matcher = LLMatcher(vocab.tokenizer, self.grammar)
        if matcher.is_error():
            raise InvalidRequest(
                f"The {describe(self.constraint)} cannot be enforced: {matcher.get_error()}",
                param=self.constraint.param,
                code="invalid_grammar",
            )
        return TokenMatcher(matcher, vocab.eos_token_ids, vocab.vocab_size)


class ConstraintCompiler:
    """Thread-safe; compiled grammars are cached by constraint (kind, schema text,
    wrapping), least recently used first out."""

    def __init__(self, vocabulary: ConstraintVocabulary) -> None:
        self.vocabulary = vocabulary
        self._lock = threading.Lock()
        self._cache: OrderedDict[Constraint, CompiledConstraint] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def compile(self, constraint: Constraint) -> CompiledConstraint:
        """The validated grammar of ``constraint``. Blocking (milliseconds, ~0.5 s the first
        time a vocabulary is used): call it off the event loop.

        Raises :class:`InvalidRequest` with the constraint's ``param`` and code
        ``invalid_grammar`` when the library refuses it (bad JSON Schema, unsupported
        keyword, bad regex or Lark).
        """
        with self._lock:
            cached = self._cache.get(constraint)
            if cached is not None:
                self._cache.move_to_end(constraint)
                self.hits += 1
                return cached
        from llguidance import LLMatcher

        tokenizer = self.vocabulary.tokenizer
        try:
            grammar = constraint_grammar(constraint)
            error = LLMatcher.validate_grammar(grammar, tokenizer)
        except InvalidRequest:
            raise
        except Exception as exc:  # the library's own parse errors
            error = str(exc)
        if error:
            raise InvalidRequest(
                f"The {describe(constraint)} cannot be enforced: {error.strip()}",
                param=constraint.param,
                code="invalid_grammar",
            )
        compiled = CompiledConstraint(constraint, grammar, self.vocabulary)
        with self._lock:
            self.misses += 1
            self._cache[constraint] = compiled
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
        return compiled
