"""Compiling constraints for a vocabulary, with a cache shared by every request."""

from __future__ import annotations

import json
import threading
import weakref
from collections import OrderedDict
from typing import Any

import llguidance
import numpy as np

from flexserv_constraints.contract import ConstraintVocabulary
from flexserv_constraints.grammar import constraint_grammar, describe
from flexserv_constraints.matcher import LLTokenMatcher
from flexserv_constraints.vocabulary import llg_tokenizer
from flexserv_core import Constraint, InvalidRequest

#: Compiled grammars kept per vocabulary (grammar text is small; matchers are per sequence).
CACHE_SIZE = 256


class LLCompiledConstraint:
    """A validated grammar for one vocabulary: :meth:`matcher` gives each sequence its own."""

    __slots__ = ("constraint", "eos_token_ids", "grammar", "tokenizer", "vocab_size")

    def __init__(
        self, constraint: Constraint, grammar: str, tokenizer: llguidance.LLTokenizer, vocab: ConstraintVocabulary
    ) -> None:
        self.constraint = constraint
        self.grammar = grammar
        self.tokenizer = tokenizer
        self.eos_token_ids = vocab.eos_token_ids
        self.vocab_size = vocab.vocab_size

    def matcher(self) -> LLTokenMatcher:
        """A fresh matcher at the start of the output (cheap: the grammar is compiled)."""
        matcher = llguidance.LLMatcher(self.tokenizer, self.grammar)
        if matcher.is_error():
            raise InvalidRequest(
                f"The {describe(self.constraint)} cannot be enforced: {matcher.get_error()}",
                param=self.constraint.param,
                code="invalid_grammar",
            )
        return LLTokenMatcher(matcher, self.eos_token_ids, self.vocab_size)


def _probe(compiled: LLCompiledConstraint) -> None:
    """Refuse, before anything is generated, a grammar the library gives up on at its
    first steps: one that can produce nothing (a schema that only refers to itself)
    or that is too complex to lex or parse (``(a{1000}){1000}``, thousands of
    choices). Validation accepts both; they fail when the first masks are computed.
    Two steps (a mask, the first allowed token, the next mask) catch both kinds."""
    matcher = compiled.matcher()
    for _ in range(2):
        allowed = np.flatnonzero(~matcher.blocked())
        error = matcher.error
        if error is None and not len(allowed) and not matcher.accepting:
            error = "no token can start the output"
        if error is not None:
            raise InvalidRequest(
                f"The {describe(compiled.constraint)} cannot be enforced: {explain(error)}",
                param=compiled.constraint.param,
                code="invalid_grammar",
            )
        following = allowed[~np.isin(allowed, compiled.eos_token_ids)]
        if not len(following):
            return
        matcher.matcher.consume_token(int(following[0]))  # not advance(): a refusal here is the client's, not logged


def explain(error: str) -> str:
    """The library's error, its first line, said plainly where it is terse."""
    first = error.strip().splitlines()[0] if error.strip() else "unknown error"
    if "NoExtensionBias" in first:
        return "it admits no output (a schema or rule that only refers to itself has no finite value)"
    return first


class _Vocabulary:
    """One vocabulary's llguidance tokenizer (built on first use) and compiled grammars."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tokenizer: llguidance.LLTokenizer | None = None
        self.cache: OrderedDict[Constraint, LLCompiledConstraint] = OrderedDict()


class LLGuidanceCompiler:
    """The :class:`~flexserv_core.ConstraintCompiler` of the ``constraints`` plugin.

    Thread-safe. Per vocabulary (held weakly: an unloaded model's goes with it), the
    library's tokenizer is built once and compiled grammars are cached by constraint
    (kind, schema text, wrapping), least recently used first out.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._vocabularies: weakref.WeakKeyDictionary[ConstraintVocabulary, _Vocabulary] = weakref.WeakKeyDictionary()
        self.hits = 0
        self.misses = 0

    def _state(self, vocabulary: ConstraintVocabulary) -> _Vocabulary:
        with self._lock:
            state = self._vocabularies.get(vocabulary)
            if state is None:
                state = self._vocabularies[vocabulary] = _Vocabulary()
            return state

    def tokenizer(self, vocabulary: ConstraintVocabulary) -> llguidance.LLTokenizer:
        """The library's view of ``vocabulary``, built on first use (~0.5 s for 49k tokens)."""
        state = self._state(vocabulary)
        with state.lock:
            if state.tokenizer is None:
                state.tokenizer = llg_tokenizer(vocabulary)
            return state.tokenizer

    def compile(self, constraint: Constraint, vocabulary: ConstraintVocabulary) -> LLCompiledConstraint:
        """The validated grammar of ``constraint``. Blocking (milliseconds, ~0.5 s the first
        time a vocabulary is used): call it off the event loop.

        Raises :class:`InvalidRequest` with the constraint's ``param`` and code
        ``invalid_grammar`` when the library refuses it (bad JSON Schema, unsupported
        keyword, bad regex or Lark).
        """
        state = self._state(vocabulary)
        with state.lock:
            cached = state.cache.get(constraint)
            if cached is not None:
                state.cache.move_to_end(constraint)
                with self._lock:
                    self.hits += 1
                return cached
        tokenizer = self.tokenizer(vocabulary)
        try:
            grammar = constraint_grammar(constraint)
            error = llguidance.LLMatcher.validate_grammar(grammar, tokenizer)
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
        compiled = LLCompiledConstraint(constraint, grammar, tokenizer, vocabulary)
        _probe(compiled)
        with state.lock:
            state.cache[constraint] = compiled
            while len(state.cache) > CACHE_SIZE:
                state.cache.popitem(last=False)
        with self._lock:
            self.misses += 1
        return compiled

    def check_schema(self, schema: Any, param: str) -> None:
        """Refuse a JSON schema llguidance could not enforce (an unknown ``type``, a
        malformed keyword), without a vocabulary: a 400 naming ``param``."""
        try:
            llguidance.JsonCompiler().compile(json.dumps(schema))
        except Exception as exc:  # the library's schema errors
            raise InvalidRequest(
                f"Invalid JSON schema: {str(exc).strip()}", param=param, code="invalid_schema"
            ) from None
