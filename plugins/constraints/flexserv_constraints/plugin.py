"""Hook implementation of the ``constraints`` plugin: the platform's constraint compiler."""

from __future__ import annotations

from flexserv_constraints.compiler import LLGuidanceCompiler
from flexserv_core import ConstraintCompiler, Settings, hookimpl


@hookimpl
def flexserv_constraint_compiler(settings: Settings) -> ConstraintCompiler:
    return LLGuidanceCompiler()
