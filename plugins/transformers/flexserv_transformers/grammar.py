"""Constrained decoding with llguidance: compile a request's :class:`Constraint`,
keep one matcher per sequence, fill the allowed-token masks of a batch at once.

Why llguidance: see the "Structured outputs" section of docs/benchmarks.md
(millisecond compiles, a ~0.2 ms batch-20 mask fill on SmolLM2's vocabulary,
native Lark, refuses schema keywords it cannot enforce).

* :class:`GrammarCompiler` (one per loaded model) turns a backend-neutral
  :class:`~flexserv_core.Constraint` into an llguidance grammar, validating it
  against the model's tokenizer; a grammar that does not compile is an
  :class:`~flexserv_core.InvalidRequest` naming the request parameter.
* :class:`GrammarState` is one sequence's matcher: it advances with every token
  the sequence keeps, so a preempted and recomputed sequence resumes where it
  was (its tokens and its matcher never diverge).
* :func:`grammar_masks` fills the masks of the rows of a batch that carry a
  grammar, by llguidance's thread pool in one call (20 constrained sequences cost
  one parallel fill, not 20 sequential ones); the paged engine runs it on a worker
  thread during the forward pass, so the masks do not add to the step.
  :func:`apply_grammar_masks` sets the blocked logits to ``-inf``.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from flexserv_core import Constraint, InvalidRequest

if TYPE_CHECKING:
    import llguidance

    from flexserv_transformers.text_tokenizer import TextTokenizer

log = logging.getLogger(__name__)

__all__ = [
    "GrammarCompiler",
    "GrammarMasks",
    "GrammarState",
    "apply_grammar_masks",
    "constraint_grammar",
    "grammar_masks",
]

#: Compiled grammars kept per model (grammar text is small; matchers are per sequence).
_CACHE_SIZE = 256

_executor: Any = None
_executor_lock = threading.Lock()


def _llg_executor() -> Any:
    global _executor
    with _executor_lock:
        if _executor is None:
            import llguidance

            _executor = llguidance.LLExecutor()
        return _executor


def _lark_string(text: str) -> str:
    # Lark string literals take JSON's escapes.
    return json.dumps(text)


#: JSON output layout: compact separators and no free whitespace between tokens
#: (a model that may pad with whitespace can loop on it until max_tokens).
_JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def _schema_text(constraint: Constraint) -> str:
    """The schema of a JSON constraint, with llguidance's layout options added."""
    if constraint.kind == "json_object":
        schema: Any = {"type": "object"}
    else:
        try:
            schema = json.loads(constraint.spec)
        except ValueError as exc:
            raise InvalidRequest(f"The JSON schema is not valid JSON: {exc}", param=constraint.param) from None
        if isinstance(schema, bool):
            schema = {} if schema else {"not": {}}
        if not isinstance(schema, dict):
            raise InvalidRequest("The JSON schema must be an object.", param=constraint.param)
    return json.dumps({**schema, "x-guidance": _JSON_OPTIONS})


def constraint_grammar(constraint: Constraint) -> str:
    """The llguidance grammar (its JSON/Lark text) of ``constraint``; not yet validated."""
    from llguidance import LLMatcher

    kind, spec = constraint.kind, constraint.spec
    if constraint.prefix or constraint.suffix or constraint.repeat:
        return LLMatcher.grammar_from_lark(_wrapped_lark(constraint))
    if kind in ("json_object", "json_schema"):
        return LLMatcher.grammar_from_json_schema(_schema_text(constraint))
    if kind == "regex":
        return LLMatcher.grammar_from_regex(spec)
    if kind == "choice":
        return LLMatcher.grammar_from_lark(f"start: {_choice_rule(spec)}")
    if kind == "grammar":
        return LLMatcher.grammar_from_lark(spec)
    raise InvalidRequest(f"Unknown constraint kind '{kind}'.", param=constraint.param)


def _choice_rule(spec: str) -> str:
    choices = json.loads(spec)
    return " | ".join(_lark_string(c) for c in choices)


def _body_rule(constraint: Constraint) -> str:
    kind, spec = constraint.kind, constraint.spec
    if kind in ("json_object", "json_schema"):
        return f"%json{_schema_text(constraint)}"
    if kind == "regex":
        return "/" + spec.replace("/", "\\/") + "/"
    if kind == "choice":
        return f"({_choice_rule(spec)})"
    raise InvalidRequest(f"A '{kind}' constraint cannot be wrapped in a prefix or suffix.", param=constraint.param)


def _wrapped_lark(constraint: Constraint) -> str:
    item = " ".join(
        part
        for part in (
            _lark_string(constraint.prefix) if constraint.prefix else "",
            _body_rule(constraint),
            _lark_string(constraint.suffix) if constraint.suffix else "",
        )
        if part
    )
    if not constraint.repeat:
        return f"start: {item}\n"
    sep = f" {_lark_string(constraint.separator)}" if constraint.separator else ""
    return f"start: item ({sep} item)*\nitem: {item}\n"


def llg_tokenizer(
    text_tokenizer: TextTokenizer, vocab_size: int, eos_token_ids: Sequence[int]
) -> llguidance.LLTokenizer:
    """llguidance's vocabulary from the serialized Rust tokenizer behind ``text_tokenizer``
    (``backend_tokenizer``: a FastTokenizer's or a transformers fast tokenizer's), what
    ``llguidance.hf.from_tokenizer`` builds without needing a transformers object."""
    import copy

    import llguidance

    backend = getattr(text_tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise InvalidRequest(
            "Structured outputs need a fast (tokenizer.json) tokenizer; this model's is not one.",
            param="response_format",
        )
    backend = copy.copy(backend)  # padding and truncation off on a copy, not on the shared one
    backend.no_padding()
    backend.no_truncation()
    eos: list[int] | int | None = list(eos_token_ids) or getattr(text_tokenizer, "eos_token_id", None)
    return llguidance.LLTokenizer(backend.to_str(), n_vocab=vocab_size, eos_token=eos)


class GrammarCompiler:
    """Compiles constraints for one tokenizer; thread-safe, with a small cache."""

    def __init__(self, text_tokenizer: TextTokenizer, eos_token_ids: Iterable[int], vocab_size: int) -> None:
        self._text_tokenizer = text_tokenizer
        self._eos = sorted(eos_token_ids)
        self._vocab_size = vocab_size
        self._tokenizer: llguidance.LLTokenizer | None = None
        self._lock = threading.Lock()
        self._cache: OrderedDict[Constraint, str] = OrderedDict()

    @property
    def tokenizer(self) -> llguidance.LLTokenizer:
        """llguidance's view of the vocabulary; built on first use (about 0.5 s for 49k tokens)."""
        with self._lock:
            if self._tokenizer is None:
                self._tokenizer = llg_tokenizer(self._text_tokenizer, self._vocab_size, self._eos)
            return self._tokenizer

    def compile(self, constraint: Constraint) -> str:
        """The validated grammar of ``constraint`` (blocking: call it off the event loop).

        Raises :class:`InvalidRequest` with the constraint's ``param`` when the
        library refuses it (bad JSON Schema, unsupported keyword, bad regex or Lark).
        """
        with self._lock:
            cached = self._cache.get(constraint)
            if cached is not None:
                self._cache.move_to_end(constraint)
                return cached
        from llguidance import LLMatcher

        tokenizer = self.tokenizer
        try:
            grammar = constraint_grammar(constraint)
            error = LLMatcher.validate_grammar(grammar, tokenizer)
        except InvalidRequest:
            raise
        except Exception as exc:  # the library's own parse errors
            error = str(exc)
        if error:
            raise InvalidRequest(
                f"The {_describe(constraint)} cannot be enforced: {error.strip()}",
                param=constraint.param,
                code="invalid_grammar",
            )
        with self._lock:
            self._cache[constraint] = grammar
            while len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)
        return grammar

    def state(self, constraint: Constraint) -> GrammarState:
        """A fresh matcher for one sequence (compiles if not cached)."""
        from llguidance import LLMatcher

        matcher = LLMatcher(self.tokenizer, self.compile(constraint))
        if matcher.is_error():
            raise InvalidRequest(
                f"The {_describe(constraint)} cannot be enforced: {matcher.get_error()}", param=constraint.param
            )
        return GrammarState(matcher, self._eos)


def _describe(constraint: Constraint) -> str:
    return {
        "json_object": "JSON object format",
        "json_schema": "JSON schema",
        "regex": "regular expression",
        "choice": "choice list",
        "grammar": "grammar",
    }.get(constraint.kind, "constraint")


class GrammarState:
    """One sequence's position in its grammar. Owned by the engine thread."""

    __slots__ = ("eos", "matcher")

    def __init__(self, matcher: llguidance.LLMatcher, eos_token_ids: Sequence[int]) -> None:
        self.matcher = matcher
        self.eos = list(eos_token_ids)

    def advance(self, token_id: int) -> None:
        """Consume a token the sequence kept (after the mask, it is always allowed)."""
        if token_id in self.eos and self.matcher.is_accepting():
            return  # the engine ends the sequence; nothing after it
        if not self.matcher.consume_token(token_id):
            log.warning("grammar rejected token %d: %s", token_id, self.matcher.get_error())


@dataclass(slots=True)
class GrammarMasks:
    """One step's masks: for each batch row in ``rows`` (those with a grammar),
    the tokens it may not take (``blocked``, bool ``[len(rows), vocab]``)."""

    rows: list[int]
    blocked: np.ndarray


def grammar_masks(states: Sequence[GrammarState | None], vocab: int) -> GrammarMasks | None:
    """The masks of the rows of a batch that carry a grammar (``None`` if none do).

    Reads the matchers only, so it may run on another thread while the forward pass
    runs, as long as no matcher advances meanwhile. EOS is allowed exactly when the
    grammar accepts. NumPy throughout: its single-threaded kernels do not wait on an
    OpenMP team, which on a loaded CPU costs more than the work itself.
    """
    rows = [i for i, s in enumerate(states) if s is not None]
    if not rows:
        return None
    import llguidance.numpy as lnp

    mask = np.full((len(rows), (vocab + 31) // 32), -1, dtype=np.int32)
    pairs = [(states[i].matcher, j) for j, i in enumerate(rows)]  # type: ignore[union-attr]
    lnp.fill_next_token_bitmask_par(_llg_executor(), pairs, mask)
    blocked = np.unpackbits(np.invert(mask).view(np.uint8), axis=1, count=vocab, bitorder="little").view(np.bool_)
    for j, i in enumerate(rows):
        state = states[i]
        assert state is not None
        if state.eos and state.matcher.is_accepting():
            blocked[j, [e for e in state.eos if e < vocab]] = False  # every EOS id of the model
    return GrammarMasks(rows, blocked)


def apply_grammar_masks(
    logits: torch.Tensor, states: Sequence[GrammarState | None], masks: GrammarMasks | None = None
) -> torch.Tensor:
    """``logits`` (float32) with every token a row's grammar does not allow set to
    ``-inf`` (rows without one are untouched); a new tensor. ``masks``: this step's,
    computed ahead by :func:`grammar_masks` (else they are computed here)."""
    if masks is None:
        masks = grammar_masks(states, logits.shape[-1])
    if masks is None:
        return logits
    blocked = masks.blocked
    if len(masks.rows) != logits.shape[0]:
        full = np.zeros(tuple(logits.shape), dtype=np.bool_)
        full[masks.rows] = blocked
        blocked = full
    if logits.device.type == "cpu":
        out = logits.float().numpy().copy()
        np.putmask(out, blocked, -np.inf)
        return torch.from_numpy(out)
    return logits.float().masked_fill(torch.from_numpy(blocked).to(logits.device), float("-inf"))
