"""FlexServ's constrained decoding with llguidance: a first-party plugin, on by default.

It answers ``flexserv_constraint_compiler``: requests' output constraints are
compiled here, above the backends, and each sequence gets a
:class:`~flexserv_core.TokenMatcher`. Backends import nothing from this package:
the contract (:class:`~flexserv_core.ConstraintVocabulary`, ``TokenMatcher``,
:func:`~flexserv_core.fill_blocked_masks`) is the core's.
"""

from flexserv_constraints.compiler import LLCompiledConstraint, LLGuidanceCompiler
from flexserv_constraints.matcher import LLTokenMatcher

__all__ = ["LLCompiledConstraint", "LLGuidanceCompiler", "LLTokenMatcher"]
