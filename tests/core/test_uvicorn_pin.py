"""The uvicorn internals the connection limits build on: pinned, and checked at import."""

from __future__ import annotations

import inspect
import tomllib
from importlib.metadata import version
from pathlib import Path

from packaging.requirements import Requirement
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from flexserv_core.edge.connections import UVICORN_INTERNALS, BoundedHttpProtocol, missing_uvicorn_internals

ROOT = Path(__file__).resolve().parents[2]
#: the constructor and asyncio's protocol API, public and stable: not uvicorn internals
ASYNCIO_PROTOCOL = {"__init__", "connection_made", "connection_lost", "data_received"}


def test_the_installed_uvicorn_is_in_the_pinned_range() -> None:
    requirements = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (uvicorn,) = [Requirement(r) for r in requirements if Requirement(r).name == "uvicorn"]
    assert any(s.operator == "<" for s in uvicorn.specifier)  # private internals: a release range, not a floor
    assert uvicorn.specifier.contains(version("uvicorn")), (str(uvicorn.specifier), version("uvicorn"))


def test_every_overridden_uvicorn_method_is_checked_at_import() -> None:
    overridden = {
        name
        for name, member in vars(BoundedHttpProtocol).items()
        if inspect.isfunction(member) and hasattr(HttpToolsProtocol, name)
    }
    assert overridden - ASYNCIO_PROTOCOL <= set(UVICORN_INTERNALS)
    assert missing_uvicorn_internals() == []


def test_a_uvicorn_without_one_is_reported() -> None:
    class Older:
        def on_url(self, url: bytes) -> None: ...

    missing = missing_uvicorn_internals(Older)
    assert "_start_asgi_task" in missing and "on_url" not in missing
