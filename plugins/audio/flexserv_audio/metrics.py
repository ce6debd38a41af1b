"""``flexserv:transcription_audio_seconds_total`` on ``/metrics``.

A prometheus_client counter (safe to increment from any thread), one per app: the
metrics hook registers it before the server exists and the routes find the same one
in the app's ``settings.state``.
"""

from __future__ import annotations

from prometheus_client import Counter

from flexserv_core import Settings, StashKey

_AUDIO_SECONDS = StashKey[Counter]("flexserv_audio: audio seconds")


def audio_seconds(settings: Settings) -> Counter:
    """Seconds of audio transcribed or translated, by model."""
    return settings.state.get_or_create(
        _AUDIO_SECONDS,
        lambda: Counter(
            "flexserv:transcription_audio_seconds",
            "Seconds of audio transcribed.",
            ["model_name"],
            registry=None,
        ),
    )
