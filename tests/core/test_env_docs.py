"""Every environment variable the core reads by name (besides the settings'
FLEXSERV_<SETTING>, listed by --help) is documented in docs/configuration.md."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_environment_variables_read_by_name_are_documented() -> None:
    names = {
        name
        for path in (ROOT / "flexserv_core").rglob("*.py")
        for name in re.findall(r"[\"'](FLEXSERV_[A-Z_]+)[\"']", path.read_text(encoding="utf-8"))
        if name != "FLEXSERV_"
    }
    assert {"FLEXSERV_PLUGINS", "FLEXSERV_DISABLE_PLUGIN_AUTOLOAD"} <= names
    docs = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert not {n for n in names if f"`{n}" not in docs}, "undocumented in docs/configuration.md"
