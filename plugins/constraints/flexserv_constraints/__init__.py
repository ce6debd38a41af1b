"""FlexServ's constrained decoding with llguidance: a first-party plugin, on by default,
and the library of the backend half of the contract.

As a plugin it answers ``flexserv_constraint_compiler``: requests' output
constraints are compiled here, above the backends, into a :class:`CompiledConstraint`
per model vocabulary, and each sequence gets a :class:`TokenMatcher`. As a library it
holds what a text backend depends on ``flexserv-constraints`` for: the
:class:`ConstraintVocabulary` it declares, the :class:`TokenMatcher` it honours and
:func:`fill_blocked_masks` (:mod:`flexserv_constraints.contract`). The core only
passes these values through.

The contract's names need no grammar library: a backend that imports them does not
load llguidance (``-p no:constraints`` or not); the llguidance classes load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import lazy_loader

from flexserv_constraints.contract import (
    BlockedMasks,
    CompiledConstraint,
    ConstraintVocabulary,
    TokenMatcher,
    fill_blocked_masks,
)

if TYPE_CHECKING:
    from flexserv_constraints.compiler import LLCompiledConstraint, LLGuidanceCompiler
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

#: llguidance's side, imported when first asked for.
__getattr__, _, _ = lazy_loader.attach(
    __name__, submod_attrs={"compiler": ["LLCompiledConstraint", "LLGuidanceCompiler"], "matcher": ["LLTokenMatcher"]}
)
