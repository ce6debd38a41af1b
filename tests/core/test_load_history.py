"""The start-up log says what each model's first request will wait for: its load, as long
as the last one on this machine took (kept in the cache directory)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import httpx
import pytest

from flexserv_core import ModelSpec
from flexserv_core.models import load_history as history_module
from flexserv_core.models.load_history import FILE_NAME, LoadHistory
from flexserv_core.testing import FakeBackendPlugin, ServedApp, make_app

CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def _served_line(caplog: pytest.LogCaptureFixture) -> str:
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("serving text model 'fake-model'")]
    assert len(lines) == 1, lines
    return lines[0]


def test_a_second_start_says_how_long_the_first_load_took(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    settings = {"cache_dir": str(tmp_path)}
    with ServedApp(make_app([FakeBackendPlugin(load_delay=0.3)], settings=settings)) as base:
        assert _served_line(caplog).endswith("; loads on its first request (not loaded on this machine before)")
        assert httpx.post(f"{base}/v1/chat/completions", json=CHAT, timeout=30).status_code == 200
    kept = json.loads((tmp_path / FILE_NAME).read_text())
    assert list(kept) == ["fake-model\nfake://"] and kept["fake-model\nfake://"] >= 0.3

    caplog.clear()
    with ServedApp(make_app([FakeBackendPlugin()], settings=settings)):
        line = _served_line(caplog)
    seconds = kept["fake-model\nfake://"]
    assert line.endswith(f"; loads on its first request ({seconds:.1f} s last time)")

    caplog.clear()
    with ServedApp(make_app([FakeBackendPlugin()], settings={**settings, "preload": ["all"]})):
        assert _served_line(caplog).endswith("; loading now (--preload)")


def spec(name: str, source: str = "src") -> ModelSpec:
    return ModelSpec(name=name, kind="text", source=source)


def test_a_model_is_known_by_name_and_source(tmp_path: Path) -> None:
    history = LoadHistory(tmp_path / FILE_NAME)
    history.record(spec("a", "one"), 1.234)
    assert history.last(spec("a", "one")) == 1.23
    assert history.last(spec("a", "two")) is None  # another source: another model
    history.record(spec("a", "one"), 2.0)
    assert history.last(spec("a", "one")) == 2.0


def test_a_broken_file_costs_the_figure_only(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    history = LoadHistory(path)
    for text in ("{not json", "[1, 2]", '{"a\\nsrc": "slow", "b\\nsrc": -1}'):
        path.write_text(text)
        assert history.last(spec("a")) is None and history.last(spec("b")) is None
    history.record(spec("a"), 0.5)  # and a new record replaces it
    assert json.loads(path.read_text()) == {"a\nsrc": 0.5}


def test_an_unwritable_cache_directory_is_not_an_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    history = LoadHistory(blocker / "sub" / FILE_NAME)  # its parent cannot be created
    history.record(spec("a"), 1.0)
    assert history.last(spec("a")) is None


def test_only_the_latest_models_are_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(history_module, "MAX_MODELS", 3)
    history = LoadHistory(tmp_path / FILE_NAME)
    for name in "abcd":
        history.record(spec(name), 1.0)
    history.record(spec("b"), 2.0)  # loaded again: the latest
    assert list(json.loads((tmp_path / FILE_NAME).read_text())) == ["c\nsrc", "d\nsrc", "b\nsrc"]
    assert not list(tmp_path.glob(".load-times-*"))  # no temporary file left behind
