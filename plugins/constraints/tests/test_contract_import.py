"""A backend imports the contract's names without loading llguidance (``-p
no:constraints`` or not); the llguidance classes still come from the package."""

from __future__ import annotations

import subprocess
import sys

import flexserv_constraints

CONTRACT = ("BlockedMasks", "CompiledConstraint", "ConstraintVocabulary", "TokenMatcher", "fill_blocked_masks")


def test_the_contract_names_load_without_llguidance() -> None:
    script = (
        f"import sys\nfrom flexserv_constraints import {', '.join(CONTRACT)}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'llguidance'"
        " or m in ('flexserv_constraints.compiler', 'flexserv_constraints.matcher')))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_public_name_resolves() -> None:
    for name in flexserv_constraints.__all__:
        assert getattr(flexserv_constraints, name) is not None
    assert flexserv_constraints.LLGuidanceCompiler.__module__ == "flexserv_constraints.compiler"
