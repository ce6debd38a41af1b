"""``flexserv plugins new NAME``: write a minimal installable plugin.

The plugin has a pyproject with the ``flexserv`` entry point, a package with one
hook (``flexserv_preprocess_request``), one route, one setting named with the
plugin's prefix, a README and tests that pass with the testing kit.
"""

from __future__ import annotations

import re
from pathlib import Path
from string import Template

from flexserv_core._version import VERSION
from flexserv_core.errors import UsageError

PLUGIN_NAME = re.compile(r"[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*")

PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "$dist"
version = "0.1.0"
description = "FlexServ plugin: $name."
readme = "README.md"
requires-python = ">=3.11"
dependencies = [
    "flexserv-core>=$core_version",
    "litestar>=2.12",
    "msgspec>=0.18",
]

[project.optional-dependencies]
test = ["flexserv-core[testing]>=$core_version", "ruff>=0.6"]

[project.entry-points.flexserv]
$name = "$package.plugin"

[tool.setuptools.packages.find]
include = ["$package*"]

[tool.pytest.ini_options]
testpaths = ["tests"]

[tool.ruff]
line-length = 120

[tool.ruff.lint]
select = ["E", "F", "W", "I", "B", "UP"]
"""

README = """\
# $dist

A FlexServ plugin. It counts the OpenAI requests the server receives
(`flexserv_preprocess_request`) and serves the count at `GET /v1/$name/stats`
with a greeting from the setting `--$flag_prefix-greeting`
(`FLEXSERV_${env_prefix}_GREETING`, `${prefix}_greeting` in the config file).

```bash
pip install -e '.[test]'
flexserv plugins            # lists "$name" with its hook and route
python -m pytest tests
flexserv run --$flag_prefix-greeting hi
```

The hooks are documented in FlexServ's `docs/hooks.md`; writing plugins in
`docs/plugins.md`.
"""

INIT = '''\
"""$dist: a FlexServ plugin (the hooks are in :mod:`$package.plugin`)."""
'''

PLUGIN = '''\
"""The $name plugin: one setting, one hook, one route."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from flexserv_core import FlexServer, RequestContext, Settings, StashKey, hookimpl
from litestar import Request, get


class ${cls}Settings(msgspec.Struct, kw_only=True):
    # Settings share one namespace: every field starts with the plugin's prefix.
    ${prefix}_greeting: Annotated[str, msgspec.Meta(description="Greeting shown by GET /v1/$name/stats.")] = "hello"


class Counts:
    """Per-server counts, kept in ``server.state`` (never in module globals)."""

    def __init__(self) -> None:
        self.requests: dict[str, int] = {}


COUNTS = StashKey[Counts]("$name.counts")


def _counts(server: FlexServer) -> Counts:
    return server.state.setdefault(COUNTS, Counts())


@hookimpl
def flexserv_add_settings() -> type[msgspec.Struct]:
    return ${cls}Settings


@hookimpl
def flexserv_preprocess_request(endpoint: str, body: dict[str, Any], context: RequestContext) -> None:
    counts = _counts(context.server).requests
    counts[endpoint] = counts.get(endpoint, 0) + 1


@get("/v1/$name/stats", summary="Requests seen by the $name plugin")
async def stats(request: Request[Any, Any, Any]) -> dict[str, Any]:
    server: FlexServer = request.app.state.flexserv
    return {
        "greeting": server.settings.get(${cls}Settings).${prefix}_greeting,
        "requests": _counts(server).requests,
    }


@hookimpl
def flexserv_register_routes(settings: Settings) -> list[Any]:
    return [stats]
'''

TEST = '''\
"""The $name plugin in a real FlexServ app, loaded through its installed entry point
(as `flexserv run` finds it), beside the testing kit's fake text backend."""

from __future__ import annotations

from typing import Any

import pytest
from flexserv_core.testing import FakeBackendPlugin

CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


@pytest.fixture
def flexserv_plugins() -> list[object | str]:
    return ["$name", FakeBackendPlugin()]


async def test_counts_requests(flexserv_client: Any) -> None:
    assert (await flexserv_client.post("/v1/chat/completions", json=CHAT)).status_code == 200
    assert (await flexserv_client.post("/v1/chat/completions", json=CHAT)).status_code == 200
    stats = (await flexserv_client.get("/v1/$name/stats")).json()
    assert stats == {"greeting": "hello", "requests": {"/v1/chat/completions": 2}}


@pytest.mark.parametrize("flexserv_settings", [{"${prefix}_greeting": "hi there"}])
async def test_serves_the_setting(flexserv_client: Any) -> None:
    assert (await flexserv_client.get("/v1/$name/stats")).json() == {"greeting": "hi there", "requests": {}}
'''


def plugin_files(name: str) -> dict[str, str]:
    """The files of plugin ``name``, by path relative to its directory."""
    if not PLUGIN_NAME.fullmatch(name):
        raise UsageError(f"plugin name {name!r}: use lowercase letters, digits and dashes (e.g. 'redact')")
    short = name.removeprefix("flexserv-").removeprefix("flexserv_") or name
    prefix = short.replace("-", "_")
    values = {
        "name": short,
        "dist": f"flexserv-{short.replace('_', '-')}",
        "package": f"flexserv_{prefix}",
        "prefix": prefix,
        "flag_prefix": prefix.replace("_", "-"),
        "env_prefix": prefix.upper(),
        "cls": "".join(part.capitalize() for part in prefix.split("_")),
        "core_version": VERSION,
    }
    package = values["package"]
    templates = {
        "pyproject.toml": PYPROJECT,
        "README.md": README,
        f"{package}/__init__.py": INIT,
        f"{package}/plugin.py": PLUGIN,
        f"tests/test_{prefix}.py": TEST,
    }
    return {path: Template(text).substitute(values) for path, text in templates.items()}


def write_plugin(name: str, parent: str | Path = ".") -> Path:
    """Write plugin ``name`` to ``parent/NAME``; refuse to overwrite anything."""
    files = plugin_files(name)
    root = Path(parent) / name
    if root.exists() and any(root.iterdir()):
        raise UsageError(f"{root} already exists and is not empty")
    for path, text in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return root
