"""docs/hooks.md is generated from flexserv_core/hookspecs.py (its one source), and
each spec's docstring states how the hook is called, matching the spec itself."""

from __future__ import annotations

import importlib.util
import inspect
import types
from pathlib import Path

import pytest

from flexserv_core import hookspecs

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "hooks.md"


def _load_script(path: Path) -> types.ModuleType:
    """The generator is a developer script (``make hook-docs``), not a module of the core."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hookdocs = _load_script(ROOT / "scripts" / "hookdocs.py")
HOOKS = sorted(n for n in dir(hookspecs) if n.startswith("flexserv_") and callable(getattr(hookspecs, n)))


def test_docs_file_is_current() -> None:
    assert DOCS.read_text(encoding="utf-8") == hookdocs.render(), "docs/hooks.md is out of date: run make hook-docs"
    assert hookdocs.main(["--check", str(DOCS)]) == 0


def test_check_reports_a_stale_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stale = tmp_path / "hooks.md"
    stale.write_text(hookdocs.render().replace("flexserv_health", "flexserv_healthz"))
    assert hookdocs.main(["--check", str(stale)]) == 1
    assert "out of date" in capsys.readouterr().err


def test_every_hook_is_in_exactly_one_section() -> None:
    listed = [name for _, names in hookdocs.sections() for name in names]
    assert sorted(listed) == HOOKS and len(listed) == len(set(listed))


@pytest.mark.parametrize("name", HOOKS)
def test_each_hook_is_rendered_with_its_signature(name: str) -> None:
    func = getattr(hookspecs, name)
    params = list(inspect.signature(func).parameters)
    expected = (
        f"{name}({', '.join(f'{p}: {func.__annotations__[p]}' for p in params)}) -> {func.__annotations__['return']}"
    )
    assert f"### {name}\n\n```python\n{expected}\n```" in DOCS.read_text(encoding="utf-8")


@pytest.mark.parametrize("name", HOOKS)
def test_docstring_states_the_calling_semantics_the_spec_has(name: str) -> None:
    func = getattr(hookspecs, name)
    doc = inspect.getdoc(func) or ""
    opts = func.flexserv_spec  # pluggy's marker attribute: {"firstresult": ..., ...}
    assert "Called" in doc, f"{name}: say when it is called"
    semantics = doc.strip().splitlines()[-1]
    assert semantics.startswith("First result" if opts["firstresult"] else "Collect all"), (name, semantics)
    assert ("may be async" in semantics) == (name in hookspecs.ASYNC_HOOKS), (name, semantics)
    assert ("synchronous" in semantics) == (name not in hookspecs.ASYNC_HOOKS), (name, semantics)
    for param in inspect.signature(func).parameters:
        assert f":param {param}:" in doc, f"{name}: document argument {param!r}"


def test_markdown_conversion() -> None:
    text = "Use ``x`` and :class:`~flexserv_core.errors.UsageError` or :mod:`a.b`.\n\n:param p: first\n    more.\n"
    assert hookdocs.to_markdown(text) == "Use `x` and `UsageError` or `a.b`.\n\nArguments:\n\n- `p`: first\n  more.\n"
