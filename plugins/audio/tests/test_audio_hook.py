"""The plugin through the hook, as the core calls it (installed entry point ``audio``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from flexserv_core.testing import make_plugin_manager

DATA = Path(__file__).resolve().parents[3] / "tests" / "data"


def test_entry_point_plugin_decodes_through_the_hook() -> None:
    pm = make_plugin_manager(["audio"])
    assert pm.infos["audio"].distribution == "flexserv-audio"
    assert "flexserv_load_audio" in pm.infos["audio"].hooks
    audio = pm.hook.flexserv_load_audio(
        data=(DATA / "speech.ogg").read_bytes(), filename="speech.ogg", content_type="audio/ogg", sampling_rate=16_000
    )
    assert isinstance(audio, np.ndarray) and audio.dtype == np.float32
    assert abs(len(audio) / 16_000 - 3.73) < 0.1


def test_without_the_plugin_nobody_decodes() -> None:
    pm = make_plugin_manager([])
    assert (
        pm.hook.flexserv_load_audio(
            data=(DATA / "speech.ogg").read_bytes(), filename="speech.ogg", content_type=None, sampling_rate=16_000
        )
        is None
    )
