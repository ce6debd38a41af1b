"""A backend's first load says what it imports and how long that took; later loads say nothing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from flexserv_torch import import_reporting


def test_a_first_import_is_reported_before_and_after_and_a_second_not_at_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "heavy_library_stand_in.py").write_text("LOADED = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "heavy_library_stand_in", raising=False)
    messages: list[tuple[str, float | None]] = []

    def progress(message: str, fraction: float | None = None) -> None:
        messages.append((message, fraction))
        # the first message comes before the import, so the log explains the wait
        assert ("heavy_library_stand_in" in sys.modules) == (len(messages) == 2)

    import_reporting(progress, "json", "heavy_library_stand_in")
    assert sys.modules["heavy_library_stand_in"].LOADED
    assert messages[0] == ("importing heavy_library_stand_in (once per process)", None)
    assert messages[1][0].startswith("imported heavy_library_stand_in in ") and messages[1][0].endswith(" s")

    messages.clear()
    import_reporting(progress, "json", "heavy_library_stand_in")
    assert messages == []
