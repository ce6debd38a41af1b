"""Generate ``docs/hooks.md`` from :mod:`flexserv_core.hookspecs`, its one source, and
from the hookspecs first-party plugins declare (:data:`PLUGIN_HOOKSPECS`).

``make hook-docs`` (``python scripts/hookdocs.py > docs/hooks.md``) rewrites the
file; ``--check FILE`` exits 1 when FILE differs from what would be generated
(``make lint`` checks ``docs/hooks.md``). A developer tool, not part of the
installed core. The
hook policy comes from the module docstring, the sections from its ``# --- name
---`` comments, and each hook's signature and text from its spec.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import re
import sys
import types
from pathlib import Path
from typing import Any

from flexserv_core import hookspecs

HEADER = """\
# Hook reference

<!-- Generated from flexserv_core/hookspecs.py by `make hook-docs` (scripts/hookdocs.py);
     edit the hookspecs, not this file (a test fails when it is out of date). -->

FlexServ plugins are Python modules or objects with functions marked `@hookimpl`
(`from flexserv_core import hookimpl`) whose names are the hooks below.
A plugin implements only the hooks it needs, and may accept a subset of a hook's
arguments (pluggy passes arguments by name). `docs/plugins.md` shows how to write,
package and test a plugin; `flexserv new-plugin NAME` (the `scaffold` plugin) writes a working one.
"""

_ROLE = re.compile(r":(?:class|mod|func|data|meth|attr|exc):`~?([^`]+)`")
_PARAM = re.compile(r"^:param (\w+):\s*(.*)$")
_SECTION = re.compile(r"^# --- (.+?) -+$")
_DEF = re.compile(r"^def (flexserv_\w+)\(")

#: Hooks first-party distributions own (entry-point group ``flexserv.hookspecs``):
#: plugin name, distribution, spec module. Listed after the core's.
PLUGIN_HOOKSPECS: list[tuple[str, str, str]] = [
    ("resources", "flexserv-resources", "flexserv_resources.hookspecs"),
    ("state", "flexserv-state", "flexserv_state.hookspecs"),
    ("tool-parsers", "flexserv-tool-parsers", "flexserv_tool_parsers.hookspecs"),
]


def _role(match: re.Match[str]) -> str:
    target = match.group(1)
    shortened = match.group(0).split("`")[1].startswith("~")
    return f"`{target.rsplit('.', 1)[-1] if shortened else target}`"


def to_markdown(text: str) -> str:
    """reST as the hookspecs write it -> Markdown: literals, roles and ``:param:`` lists."""
    text = _ROLE.sub(_role, text.replace("``", "`"))
    out: list[str] = []
    for line in text.splitlines():
        param = _PARAM.match(line)
        if param:
            if not out or not out[-1].startswith(("- `", "  ")):
                out.append("Arguments:\n")
            out.append(f"- `{param.group(1)}`: {param.group(2)}")
        elif out and out[-1].startswith(("- `", "  ")) and line.startswith("    ") and line.strip():
            out.append("  " + line.strip())  # continuation of a :param: item
        else:
            out.append(line)
    return "\n".join(out).strip() + "\n"


def signature(func: Any) -> str:
    """``name(arg: type, ...) -> type`` as written in the spec (annotations are strings)."""
    ann = func.__annotations__
    params = ", ".join(f"{name}: {ann[name]}" for name in inspect.signature(func).parameters)
    return f"{func.__name__}({params}) -> {ann['return']}"


def sections(module: types.ModuleType = hookspecs) -> list[tuple[str, list[str]]]:
    """Hook names grouped under the spec module's ``# --- name ---`` comments, in source order."""
    grouped: list[tuple[str, list[str]]] = []
    for line in inspect.getsource(module).splitlines():
        if match := _SECTION.match(line):
            grouped.append((match.group(1), []))
        elif (match := _DEF.match(line)) and grouped:
            grouped[-1][1].append(match.group(1))
    return grouped


def policy() -> str:
    doc = inspect.getdoc(hookspecs) or ""
    start = doc.index("Hook policy")
    return to_markdown(doc[start:].split("\n", 1)[1])


def _hooks(module: types.ModuleType, parts: list[str], suffix: str = "") -> None:
    for title, names in sections(module):
        parts.append(f"## {title[0].upper()}{title[1:]}{suffix}\n")
        for name in names:
            func = getattr(module, name)
            doc = to_markdown(inspect.getdoc(func) or "")
            parts.append(f"### {name}\n\n```python\n{signature(func)}\n```\n\n{doc}")


def render() -> str:
    parts = [HEADER, "## Hook policy\n", policy()]
    _hooks(hookspecs, parts)
    for plugin, distribution, module in PLUGIN_HOOKSPECS:
        _hooks(importlib.import_module(module), parts, f" (declared by the `{plugin}` plugin, {distribution})")
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/hookdocs.py", description=__doc__)
    parser.add_argument("--check", metavar="FILE", type=Path, help="Exit 1 if FILE is not what would be generated.")
    args = parser.parse_args(argv)
    text = render()
    if args.check is None:
        sys.stdout.write(text)
        return 0
    if args.check.read_text(encoding="utf-8") != text:
        print(
            f"{args.check} is out of date: run make hook-docs (python scripts/hookdocs.py > {args.check})",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
