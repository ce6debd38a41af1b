"""The server's budget of decoded audio (``--audio-max-seconds-in-flight``).

Decoded audio is mono float32 at the model's rate (16 kHz for Whisper: 64 KB a
second, 115 MB at the default 1800 s limit), while its upload can be a few MB; a
model transcribes one request at a time, and without a budget every request
waiting for it held its decoded audio.
"""

from __future__ import annotations

import math

from flexserv_batching import Budget

from flexserv_audio.schemas import TranscriptionSettings
from flexserv_core import FlexServer, StashKey


def milliseconds(seconds: float) -> int:
    """The budget's unit: whole milliseconds of audio, so that shares add up exactly."""
    return math.ceil(seconds * 1000)


BUDGET_KEY = StashKey[Budget]("audio-seconds-in-flight")


def audio_budget(server: FlexServer) -> Budget:
    """The server's budget, made on first use from its settings."""
    limit = milliseconds(server.settings.get(TranscriptionSettings).audio_max_seconds_in_flight)
    return server.state.get_or_create(BUDGET_KEY, lambda: Budget(limit))
