"""FlexServ's constrained decoding with llguidance: a first-party plugin, on by default,
and the library of the backend half of the contract.

As a plugin it answers ``flexserv_constraint_compiler``: requests' output
constraints are compiled here, above the backends, into a :class:`CompiledConstraint`
per model vocabulary, and each sequence gets a :class:`TokenMatcher`. As a library it
holds what a text backend depends on ``flexserv-constraints`` for: the
:class:`ConstraintVocabulary` it declares, the :class:`TokenMatcher` it honours and
:func:`fill_blocked_masks` (:mod:`flexserv_constraints.contract`). The core only
passes these values through.
"""

from flexserv_constraints.compiler import LLCompiledConstraint, LLGuidanceCompiler
from flexserv_constraints.contract import (
    BlockedMasks,
    CompiledConstraint,
    ConstraintVocabulary,
    TokenMatcher,
    fill_blocked_masks,
)
from flexserv_constraints.matcher import LLTokenMatcher

__all__ = [
    "BlockedMasks",
    "CompiledConstraint",
    "ConstraintVocabulary",
    "LLCompiledConstraint",
    "LLGuidanceCompiler",
    "LLTokenMatcher",
    "TokenMatcher",
    "fill_blocked_masks",
]
