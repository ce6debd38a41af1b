"""The audio routes' settings, requests and (for ``/openapi.json``) response shapes."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Struct

ResponseFormat = Literal["json", "text", "srt", "vtt", "verbose_json"]
Granularity = Literal["word", "segment"]


class TranscriptionSettings(Struct, kw_only=True, forbid_unknown_fields=True):
    """Limits of ``POST /v1/audio/transcriptions`` and ``/v1/audio/translations``.

    Prefixed with the plugin's name, so that under ``-p no:audio`` a config file or
    environment that sets them is ignored with a warning; the names they had as core
    settings (``max_audio_bytes``, ``max_audio_seconds``) are aliases."""

    audio_max_bytes: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            description="Largest audio upload in bytes; larger ones get a 413 (OpenAI: 25 MB).",
            extra={"aliases": ["max_audio_bytes"]},
        ),
    ] = 25 * 1024 * 1024
    audio_max_seconds: Annotated[
        float,
        msgspec.Meta(
            gt=0,
            description="Longest audio, in seconds after decoding, a transcription accepts.",
            extra={"aliases": ["max_audio_seconds"]},
        ),
    ] = 1800.0
    audio_max_seconds_in_flight: Annotated[
        float,
        msgspec.Meta(
            gt=0,
            description="Most seconds of audio the server holds decoded at once, all transcriptions and "
            "translations together (64 KB a second at 16 kHz, until the model is done with it): a request "
            "waits for --audio-max-seconds of it before it decodes and gives back what its audio did not use. "
            "The default is two requests at the default limit: one transcribed, the next decoded. A request "
            "larger than this still runs, alone.",
        ),
    ] = 3600.0


class TranscriptionRequest(Struct, kw_only=True):
    """The non-file fields of the multipart form (OpenAI's names)."""

    model: str | None = None
    language: str | None = None
    prompt: str | None = None
    temperature: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] = 0.0
    response_format: ResponseFormat = "json"
    stream: bool = False
    timestamp_granularities: list[Granularity] = msgspec.field(default_factory=list)


class TranslationRequest(Struct, kw_only=True):
    """The non-file fields of ``/v1/audio/translations`` (no ``language``: it is detected)."""

    model: str | None = None
    prompt: str | None = None
    temperature: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] = 0.0
    response_format: ResponseFormat = "json"


# --- documented shapes (the routes build plain values) ---------------------------------


class TranscriptionForm(Struct, kw_only=True):
    """The multipart form of ``/v1/audio/transcriptions`` (``file`` is the audio).

    ``timestamp_granularities[]`` (repeat the field per item) needs ``verbose_json``;
    ``stream`` (``json``/``text`` only) answers with server-sent events."""

    file: bytes
    model: str | None = None
    language: str | None = None
    prompt: str | None = None
    temperature: float = 0.0
    response_format: Literal["json", "text", "srt", "verbose_json", "vtt"] = "json"
    stream: bool = False
    timestamp_granularities: list[Literal["word", "segment"]] = []


class TranslationForm(Struct, kw_only=True):
    """The multipart form of ``/v1/audio/translations``: speech in any language to English text."""

    file: bytes
    model: str | None = None
    prompt: str | None = None
    temperature: float = 0.0
    response_format: Literal["json", "text", "srt", "verbose_json", "vtt"] = "json"


class TranscriptionJson(Struct, kw_only=True):
    text: str


class TranscriptionSegmentJson(Struct, kw_only=True):
    id: int
    seek: int
    start: float
    end: float
    text: str
    tokens: list[int]
    temperature: float
    avg_logprob: float
    compression_ratio: float
    no_speech_prob: float


class TranscriptionWordJson(Struct, kw_only=True):
    word: str
    start: float
    end: float


class TranscriptionVerboseJson(Struct, kw_only=True, omit_defaults=True):
    """``segments`` unless only word timestamps were asked for; ``words`` when they were."""

    task: Literal["transcribe", "translate"] = "transcribe"
    language: str
    duration: float
    text: str
    segments: list[TranscriptionSegmentJson] | None = None
    words: list[TranscriptionWordJson] | None = None


class TranscriptionStreamEvent(Struct, kw_only=True, omit_defaults=True):
    """One event of a streamed transcription: ``transcript.text.delta`` events carry
    ``delta`` (they join to the full text), the last, ``transcript.text.done``, ``text``."""

    type: Literal["transcript.text.delta", "transcript.text.done"]
    delta: str | None = None
    text: str | None = None
