"""Every hookspec is documented in docs/hooks.md with its exact signature."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from flexserv_core import hookspecs

DOCS = Path(__file__).resolve().parents[2] / "docs" / "hooks.md"
HOOKS = sorted(n for n in dir(hookspecs) if n.startswith("flexserv_") and callable(getattr(hookspecs, n)))


def signature_text(func: object) -> str:
    ann = func.__annotations__  # type: ignore[attr-defined]
    params = ", ".join(f"{p}: {ann[p]}" for p in inspect.signature(func).parameters)  # type: ignore[arg-type]
    return f"{func.__name__}({params}) -> {ann['return']}"  # type: ignore[attr-defined]


def documented_sections() -> dict[str, str]:
    text = DOCS.read_text()
    parts = re.split(r"^## (flexserv_\w+)\s*$", text, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


def test_there_are_hooks() -> None:
    assert len(HOOKS) >= 12


@pytest.mark.parametrize("name", HOOKS)
def test_hook_is_documented_with_its_signature(name: str) -> None:
    sections = documented_sections()
    assert name in sections, f"{name} has no '## {name}' section in docs/hooks.md"
    expected = signature_text(getattr(hookspecs, name))
    assert f"```python\n{expected}\n```" in sections[name], (
        f"documented signature of {name} differs from the hookspec:\n{expected}"
    )


@pytest.mark.parametrize("name", HOOKS)
def test_hookspec_docstring_says_how_it_is_called(name: str) -> None:
    doc = inspect.getdoc(getattr(hookspecs, name)) or ""
    assert "Called" in doc, f"{name}: say when it is called"
    assert re.search(r"First result|Collect all", doc), f"{name}: say first result or collect all"


def test_no_documented_hook_is_stale() -> None:
    stale = set(documented_sections()) - set(HOOKS)
    assert not stale, f"docs/hooks.md documents hooks that do not exist: {sorted(stale)}"
