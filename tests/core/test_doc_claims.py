"""The user-facing docs name only flags, defaults, routes and files that exist: every
``--flag`` is an option of a ``flexserv`` command, every default a settings table or a
"(default N)" states is the setting's, every ``METHOD /path`` is a served route (the
scope matrix lists them all) and every repository path names a file or directory."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from flexserv_core import hooks
from flexserv_core.cli.main import main
from flexserv_core.plugin_manager import create_plugin_manager
from flexserv_core.settings import describe_fields
from tests.core.test_scope_matrix import SCOPES

ROOT = Path(__file__).resolve().parents[2]
DOCS = [
    ROOT / "README.md",
    *(ROOT / "docs" / f"{name}.md" for name in ("api", "configuration", "models", "scaling", "state", "testing")),
    *sorted(ROOT.glob("plugins/*/README.md")),
    *sorted(ROOT.glob("contrib/*/README.md")),
]
COMMANDS = ("run", "plugins", "bench", "new-plugin", "ray-serve", "tool-parsers")
# options of other programs the docs show (mutmut, `ray start`)
OTHER_PROGRAMS = {"--all", "--max-children", "--head", "--block", "--metrics-export-port"}
# routes a doc names that the scope matrix's app does not serve, and why
NOT_IN_THE_MATRIX = {
    ("POST", "/v1/flexserv/models/load"): "the playground uses it only when a plugin lists it",
    ("GET", "/v1/contrib/request-policy"): "the contrib example plugin's route",
}


def docs() -> list[tuple[Path, str]]:
    return [(path, path.read_text(encoding="utf-8")) for path in DOCS]


def where(path: Path, text: str, position: int) -> str:
    return f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, position) + 1}"


@pytest.fixture(scope="module")
def defaults() -> dict[str, object]:
    """Each flag (aliases included) of every installed plugin's settings, with its default."""
    pm = create_plugin_manager([])
    return {
        flag: field.default
        for structs in hooks.settings_by_plugin(pm).values()
        for struct in structs
        for field in describe_fields(struct)
        for flag in field.flags
    }


def command_options() -> set[str]:
    options: set[str] = set()
    for command in COMMANDS:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            main([command, "--help"])
        options |= set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*[a-z0-9]", out.getvalue()))
    return options


def test_every_flag_the_docs_name_is_an_option_of_a_command() -> None:
    options = command_options() | OTHER_PROGRAMS
    assert "--model-timeout" in options and "--ray-replicas" in options and "--concurrency" in options
    unknown = [
        f"{where(path, text, m.start())}: {m.group()}"
        for path, text in docs()
        # a flag, not a prefix (`--ray-*`) or a placeholder (`--my-plugin-limit` is plugins.md's)
        for m in re.finditer(r"(?<![\w-])--[a-z][a-z0-9-]*[a-z0-9](?![\w*-])", text)
        if m.group() not in options
    ]
    assert not unknown, unknown


_UNITS = {"": 1, "s": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "Mi": 2**20, "M": 10**6, "days": 86400}
_NUMBER = re.compile(r"(-?\d[\d,]*(?:\.\d+)?)(?:\s*(KiB|MiB|GiB|Mi|M|s|days)\b)?")


def _claimed(text: str) -> object | None:
    """A default as the docs write it (`2048`, `10 MiB`, `1,000,000`, `0 (auto)`, `on`,
    `` `lru` ``), or None when the text is no such value."""
    text = text.strip().strip("`").strip()
    if text in ("on", "off"):
        return text == "on"
    number = _NUMBER.match(text)
    if number:
        return float(number.group(1).replace(",", "")) * _UNITS[number.group(2) or ""]
    word = re.fullmatch(r"[a-z][a-z0-9_]*", text)
    return word.group() if word else None


def _agrees(claim: object, default: object) -> bool:
    if isinstance(claim, bool) or isinstance(default, bool) or isinstance(claim, str):
        return claim == default
    return isinstance(default, int | float) and abs(float(claim) - default) <= 1e-9 * max(1.0, abs(default))  # type: ignore[arg-type]


def default_claims(text: str) -> list[tuple[int, str, str]]:
    """(position, flag, claimed default): a table's `default` column (or `setting
    (default)`: `` `--flag` (N) ``), `` `--flag` `` followed by "(default N" or
    ", default N", and `` `--flag` (N unit``."""
    claims: list[tuple[int, str, str]] = []
    column, paired = None, False
    offset = 0
    for line in text.splitlines(keepends=True):
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if not cells:
            column = None
        elif column is None and any(c in ("default", "setting (default)") for c in cells):
            column = next(i for i, c in enumerate(cells) if c in ("default", "setting (default)"))
            paired = cells[column] == "setting (default)"
        elif column is not None and len(cells) > column:
            if paired:
                claims += [
                    (offset, m.group(1), m.group(2)) for m in re.finditer(r"`(--[a-z0-9-]+)` \(([^;)]+)", cells[column])
                ]
            elif (flag := re.match(r"`(--[a-z0-9-]+)`", cells[0])) is not None:
                claims.append((offset, flag.group(1), re.sub(r"\s*\(.*", "", cells[column])))
        offset += len(line)
    for m in re.finditer(r"`(--[a-z0-9-]+)(?: [A-Z]+)?`,?\s+\(?(?:alias [^,)]*, )?default ([^;)]+)", text):
        claims.append((m.start(), m.group(1), m.group(2)))
    # "(120 s", "(512 MiB)": a quantity with its unit (a bare number there may be a status)
    for m in re.finditer(r"`(--[a-z0-9-]+)` \((\d[\d,.]* (?:s|KiB|MiB|GiB)\b)", text):
        claims.append((m.start(), m.group(1), m.group(2)))
    return claims


def test_every_default_the_docs_state_is_the_settings(defaults: dict[str, object]) -> None:
    checked, wrong = 0, []
    for path, text in docs():
        for position, flag, value in default_claims(text):
            claim = _claimed(value)
            if flag not in defaults or claim is None or (defaults[flag] is None and not isinstance(claim, float)):
                continue
            checked += 1
            if not _agrees(claim, defaults[flag]):
                wrong.append(
                    f"{where(path, text, position)}: {flag} default {value!r}, the setting's is {defaults[flag]!r}"
                )
    assert checked > 50, checked  # the tables and the "(default N)" phrases are found
    assert not wrong, wrong


def test_every_route_the_docs_name_is_served() -> None:
    served = {(method, re.sub(r"\{[^}]*\}", "{}", template)) for method, template in SCOPES}
    served |= set(NOT_IN_THE_MATRIX)
    unknown = [
        f"{where(path, text, m.start())}: {m.group(1)} {m.group(2)}"
        for path, text in docs()
        for m in re.finditer(r"\b(GET|POST|DELETE|PUT|PATCH) (/[\w./{}:-]*\w}?)", text)
        if (m.group(1), re.sub(r"\{[^}]*\}", "{}", m.group(2))) not in served
    ]
    assert not unknown, unknown


def test_every_repository_path_the_docs_name_exists() -> None:
    """Relative to the repository, the doc's directory, or a plugin (a plugin's docs
    name its own `tests/...`); globs must match something."""
    bases = [ROOT, *(p.parent for p in ROOT.glob("plugins/*/pyproject.toml"))]
    pattern = (
        r"(?<![\w./-])((?:benchmarks|contrib|docs|flexserv_\w+|plugins|requirements|scripts|tests)/[\w.*/-]*[\w*/])"
    )
    missing = [
        f"{where(path, text, m.start())}: {m.group(1)}"
        for path, text in docs()
        for m in re.finditer(pattern, text)
        if not any(list(base.glob(m.group(1).split("::")[0].rstrip("/"))) for base in [path.parent, *bases])
    ]
    assert not missing, missing
