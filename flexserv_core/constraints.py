"""Constrained decoding as the core sees it: a compiler plugin's service, asked for by the text session.

A request's output constraint (``response_format``, ``structured_outputs``, a
required or named tool call, Responses ``text.format``) is a
:class:`~flexserv_core.Constraint`; the plugin that answers
``flexserv_constraint_compiler`` (the first-party ``constraints`` plugin, llguidance)
compiles it for the model's ``constraint_vocabulary`` into ``params.grammar``, which
the backend honours. The core only passes the vocabulary and the compiled constraint
through: their types, and the per-sequence matcher, are the backend half of the
contract in the ``flexserv_constraints`` library. Without a compiler
(``-p no:constraints``) a constrained request is a 400 naming its parameter.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

import msgspec

from flexserv_core.errors import InvalidRequest, UnsupportedParameter

if TYPE_CHECKING:
    from flexserv_core.backends.base import Constraint, SamplingParams, TextGenerationModel

T = TypeVar("T")

#: The first-party plugin that compiles constraints, and its distribution.
CONSTRAINTS_PLUGIN = ("constraints", "flexserv-constraints")


@runtime_checkable
class ConstraintCompiler(Protocol):
    """What ``flexserv_constraint_compiler`` returns: thread-safe, shared by every request."""

    def compile(self, constraint: Constraint, vocabulary: Any) -> object:
        """``constraint`` compiled for ``vocabulary`` (the model's ``constraint_vocabulary``,
        a ``flexserv_constraints.ConstraintVocabulary``): the backend's ``params.grammar``, a
        ``flexserv_constraints.CompiledConstraint``. Blocking (the core calls it off the event
        loop). Raises :class:`~flexserv_core.InvalidRequest` naming ``constraint.param`` when it
        cannot be enforced."""

    def check_schema(self, schema: Any, param: str) -> None:
        """Raise :class:`~flexserv_core.InvalidRequest` naming ``param`` for a JSON
        schema this compiler could not enforce (tool ``parameters`` are checked this
        way whatever ``tool_choice`` says). Quick: called on the event loop."""


class WatchedConstraint:
    """One choice's compiled constraint (its ``params.grammar``): the backend takes its
    matcher from here as from the compiled one, and the text session asks, once the
    choice has ended, whether that matcher gave up on the way (its ``error``: the
    grammar turned too complex to follow), so that such an output is an error, never
    a normal finish."""

    __slots__ = ("_matchers", "compiled")

    def __init__(self, compiled: Any) -> None:
        self.compiled = compiled
        self._matchers: list[Any] = []

    @property
    def constraint(self) -> Constraint:
        constraint: Constraint = self.compiled.constraint
        return constraint

    def matcher(self) -> Any:
        matcher = self.compiled.matcher()
        self._matchers.append(matcher)
        return matcher

    def failure(self) -> InvalidRequest | None:
        for matcher in self._matchers:
            error = getattr(matcher, "error", None)
            if error:
                return InvalidRequest(
                    f"The output constraint could not be followed to the end: {str(error).strip().splitlines()[0]}",
                    param=self.constraint.param,
                    code="invalid_grammar",
                )
        return None


def constraints_unavailable(param: str) -> UnsupportedParameter:
    """The 400 for a constrained request on a server without a constraint compiler;
    it names the request's top-level parameter (``response_format``, ``tool_choice``...)."""
    top = param.split(".")[0].split("[")[0]
    name, distribution = CONSTRAINTS_PLUGIN
    return UnsupportedParameter(
        f"'{top}' needs constrained decoding, which this server does not offer: no plugin compiles constraints"
        f" (the '{name}' plugin, {distribution}, is not loaded).",
        param=top,
    )


async def prepare_params(
    model: TextGenerationModel, params: SamplingParams, *, constraints: ConstraintCompiler | None
) -> SamplingParams:
    """``params`` with its constraint compiled into ``params.grammar`` for ``model``'s
    vocabulary, after the backend's own :meth:`~TextGenerationModel.prepare` checks.

    ``constraints``: the server's compiler (``server.constraints``; ``None`` when no
    plugin offers one). The text session calls this once per request (the choices
    share it); a plugin that calls ``model.generate`` itself (a document extractor, a
    tool) calls it too. A constrained request gets a 400 naming its parameter when
    the server has no compiler or the model no
    :attr:`~TextGenerationModel.constraint_vocabulary`, and a sampling extension
    (``min_p``...) the model's backend does not list in its
    :attr:`~TextGenerationModel.sampling_extensions` a 400 naming it.
    """
    unsupported = [name for name in params.extensions_used() if name not in model.sampling_extensions]
    if unsupported:
        raise UnsupportedParameter(
            f"The model '{model.spec.name}' does not support '{unsupported[0]}': its backend does not implement it.",
            param=unsupported[0],
        )
    constraint = params.constraint
    if constraint is not None and params.grammar is None:
        if constraints is None:
            raise constraints_unavailable(constraint.param)
        vocabulary = model.constraint_vocabulary
        if vocabulary is None:
            raise UnsupportedParameter(
                f"The model '{model.spec.name}' does not support constrained decoding"
                f" ('{constraint.param.split('.')[0]}'): its backend does not take part in the platform's"
                " constraint service.",
                param=constraint.param,
            )
        # milliseconds (the first one for a vocabulary builds the compiler's view of it, ~0.5 s): off the loop
        compiled = await _to_thread_to_its_end(constraints.compile, constraint, vocabulary)
        params = msgspec.structs.replace(params, grammar=compiled)
    if constraint is not None or params.logit_bias:
        await model.prepare(params)
    return params


async def _to_thread_to_its_end(work: Callable[..., T], *args: Any) -> T:
    """``work(*args)`` in a worker thread; a cancelled caller (its client went away)
    still waits for the thread to end. The thread reads the model (the vocabulary's
    first build calls the backend's tokenizer), so the request's lease must outlive
    it: a model unloaded under it may be freed native memory (llama.cpp)."""
    running = asyncio.ensure_future(asyncio.to_thread(work, *args))
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        await asyncio.wait([running])
        if not running.cancelled():
            running.exception()  # the caller is gone: its result or error goes unread, without a warning
        raise
