"""Constrained decoding as a platform service.

A request's output constraint (``response_format``, ``structured_outputs``, a
required or named tool call, Responses ``text.format``) is compiled here, above
the backends, once per request and cached across requests per vocabulary. A text
backend takes part by declaring :attr:`TextGenerationModel.constraint_vocabulary`
and, per sequence, honouring a :class:`TokenMatcher`:

1. ``matcher = params.grammar.matcher()`` when the sequence starts;
2. before sampling each token, block what ``matcher.fill_blocked(row)`` marks
   (or let :func:`fill_blocked_masks` fill a whole batch's rows at once);
3. ``matcher.advance(token_id)`` with the token it kept.

The matcher allows an end-of-sequence token exactly when the output is complete.
See "Writing a text backend" in ``docs/plugins.md``.
"""

from flexserv_core.constraints.compiler import CompiledConstraint, ConstraintCompiler
from flexserv_core.constraints.masks import BlockedMasks, fill_blocked_masks
from flexserv_core.constraints.matcher import TokenMatcher
from flexserv_core.constraints.prepare import prepare_params
from flexserv_core.constraints.vocabulary import ConstraintVocabulary

__all__ = [
    "BlockedMasks",
    "CompiledConstraint",
    "ConstraintCompiler",
    "ConstraintVocabulary",
    "TokenMatcher",
    "fill_blocked_masks",
    "prepare_params",
]
