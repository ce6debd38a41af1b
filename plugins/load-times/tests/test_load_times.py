"""Start-up says what each model's first request will wait for: its load, as long as the
last one took, kept in the state store across restarts."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import httpx
import pytest
from flexserv_load_times.plugin import record_id

from flexserv_core import ModelSpec, create_plugin_manager
from flexserv_core.testing import FakeBackendPlugin, ServedApp, make_app

CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def _notes(caplog: pytest.LogCaptureFixture) -> list[str]:
    notes = re.compile(r"model 'fake-model' (loads on its first request|is loading now)")
    return [r.getMessage() for r in caplog.records if notes.match(r.getMessage())]


def test_the_plugin_is_installed_and_on_by_default() -> None:
    loaded = create_plugin_manager([])
    assert loaded.infos["load-times"].distribution == "flexserv-load-times"


def test_a_second_start_says_how_long_the_first_load_took(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    plugins: list[object | str] = ["state-sqlite", "load-times"]
    settings = {"state_url": f"sqlite:///{tmp_path / 'state.db'}"}
    app = make_app([FakeBackendPlugin(load_delay=0.3), *plugins], settings=settings)
    with ServedApp(app) as base:
        assert httpx.post(f"{base}/v1/chat/completions", json=CHAT, timeout=30).status_code == 200
    messages = [r.getMessage() for r in caplog.records]
    served = next(i for i, m in enumerate(messages) if m.startswith("serving text model 'fake-model'"))
    said = messages.index("model 'fake-model' loads on its first request (not loaded on this machine before)")
    assert said > served  # after the lines that list the served models

    caplog.clear()
    with ServedApp(make_app([FakeBackendPlugin(), *plugins], settings=settings)):
        pass
    (note,) = _notes(caplog)
    seconds = re.fullmatch(r"model 'fake-model' loads on its first request \((\d+\.\d) s last time\)", note)
    assert seconds is not None, note
    assert 0.3 <= float(seconds[1]) < 30

    caplog.clear()
    with ServedApp(make_app([FakeBackendPlugin(), *plugins], settings={**settings, "preload": ["all"]})):
        pass
    assert _notes(caplog) == ["model 'fake-model' is loading now (--preload)"]


def test_a_model_is_known_by_name_and_source() -> None:
    a = ModelSpec(name="a", kind="text", source="one")
    assert record_id(a) == record_id(ModelSpec(name="a", kind="text", source="one"))
    assert record_id(a) != record_id(ModelSpec(name="a", kind="text", source="two"))
    assert record_id(a) != record_id(ModelSpec(name="b", kind="text", source="one"))


def test_without_the_plugin_or_the_store_nothing_is_said(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    for app in (
        make_app([FakeBackendPlugin()], block=["load-times"]),
        make_app([FakeBackendPlugin(), "load-times"], block=["state"]),
    ):
        with ServedApp(app) as base:
            assert httpx.post(f"{base}/v1/chat/completions", json=CHAT, timeout=30).status_code == 200
    assert _notes(caplog) == []
