"""Every error body carries a stable ``code``, never ``null``, and docs/api.md
lists every code. The error classes and the codes raise sites name are found by
reading the source of the core and of every plugin, so a new class or code is
covered without editing this file."""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Iterator
from http import HTTPStatus
from pathlib import Path

import pytest

from flexserv_core.api.errors import status_code_name
from flexserv_core.errors import FlexServError
from flexserv_core.testing import app_client, make_app

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [ROOT / "flexserv_core", *ROOT.glob("plugins/*/flexserv_*"), *ROOT.glob("contrib/*/flexserv_*")]
CODE = re.compile(r"[a-z][a-z0-9_]*")


def _documented_codes() -> set[str]:
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    section = text.split("### Error codes", 1)[1].split("\n#", 1)[0]
    return {
        code
        for line in section.splitlines()
        if line.startswith("| `")
        for code in re.findall(r"`([a-z0-9_]+)`", line.split("|")[1])
    }


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for source in SOURCES:
        if source.name.endswith(".egg-info"):
            continue
        for path in source.rglob("*.py"):
            module = ".".join(path.relative_to(source.parent).with_suffix("").parts)
            yield module.removesuffix(".__init__"), ast.parse(path.read_text(encoding="utf-8"))


def _error_classes() -> list[type[FlexServError]]:
    """Every FlexServError subclass the core and the plugins define, imported."""
    names = {"FlexServError"}
    found: list[tuple[str, str]] = []
    parsed = list(_modules())
    changed = True
    while changed:  # a subclass of a subclass, in any module
        changed = False
        for module, tree in parsed:
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and node.name not in names:
                    bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                    if bases & names:
                        names.add(node.name)
                        found.append((module, node.name))
                        changed = True
    classes = [getattr(importlib.import_module(module), name) for module, name in found]
    return [FlexServError, *classes]


def _codes_named_at_raise_sites() -> dict[str, str]:
    """Code literals given to an error class, or to a helper that takes a ``code``
    parameter (by keyword or position), and those parameters' defaults, by where."""
    parsed = list(_modules())
    positions: dict[str, int | None] = {cls.__name__: None for cls in _error_classes()}  # keyword only
    codes: dict[str, str] = {}
    for module, tree in parsed:
        # a class whose __init__ takes the code is called by the class's name
        inits = {
            item: node.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef)
            for item in node.body
            if isinstance(item, ast.FunctionDef) and item.name == "__init__"
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                args = [a.arg for a in node.args.args if a.arg not in ("self", "cls")]
                names = args + [a.arg for a in node.args.kwonlyargs]
                if "code" not in names:
                    continue
                positions[inits.get(node, node.name)] = args.index("code") if "code" in args else None
                defaults = dict(zip(reversed(args), reversed(node.args.defaults), strict=False))
                defaults |= {a.arg: d for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults, strict=True) if d}
                default = defaults.get("code")
                if isinstance(default, ast.Constant) and isinstance(default.value, str):
                    codes[default.value] = f"{module}:{node.lineno}"
    for module, tree in parsed:
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name not in positions:
                continue
            given = [k.value for k in node.keywords if k.arg == "code"]
            position = positions[name]
            if position is not None and len(node.args) > position:
                given.append(node.args[position])
            for value in given:
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    codes[value.value] = f"{module}:{node.lineno}"
    return codes


@pytest.mark.parametrize("cls", _error_classes(), ids=lambda cls: f"{cls.__module__}.{cls.__name__}")
def test_every_error_class_gives_a_documented_code(cls: type[FlexServError]) -> None:
    error = cls("something went wrong")
    body = error.to_dict()["error"]
    assert body["code"] is not None and CODE.fullmatch(body["code"]), f"{cls.__name__}: code {body['code']!r}"
    assert body["code"] in _documented_codes(), f"{cls.__name__}'s code {body['code']!r} is not in docs/api.md"


def test_every_code_a_raise_site_names_is_documented() -> None:
    codes = _codes_named_at_raise_sites()
    assert len(codes) > 20, codes  # the walk finds the raise sites
    missing = {code: where for code, where in codes.items() if code not in _documented_codes()}
    assert not missing, f"codes not listed under 'Error codes' in docs/api.md: {missing}"


def test_every_http_status_has_a_code() -> None:
    for status in HTTPStatus:
        if status >= 400:
            assert CODE.fullmatch(status_code_name(status)), status
    assert status_code_name(409) == "conflict"
    assert status_code_name(500) == "internal_error"


async def test_framework_errors_carry_codes() -> None:
    async with app_client(make_app()) as client:
        answers = [
            await client.get("/no/such/route"),
            await client.delete("/v1/models"),
            await client.post("/v1/flexserv/models/unload", content=b"{", headers={"content-type": "application/json"}),
            await client.post("/v1/flexserv/models/unload", json={"model_id": 3}),
        ]
    for response in answers:
        assert response.status_code >= 400
        assert response.json()["error"]["code"] in _documented_codes(), response.text
