"""OpenAI's audio API for FlexServ, and the contract of transcription backends.

A plugin (``/v1/audio/transcriptions`` and ``/v1/audio/translations``, see
:mod:`flexserv_audio.plugin`) and a library: a backend that serves transcription
models depends on ``flexserv-audio`` and subclasses :class:`TranscriptionModel`.
Importing this package stays cheap (no decoder, no Litestar): backends import it
at start-up.
"""

from flexserv_audio.model import (
    Transcription,
    TranscriptionModel,
    TranscriptionSegment,
    TranscriptionTask,
    TranscriptionWord,
)

__version__ = "0.1.0"

__all__ = ["Transcription", "TranscriptionModel", "TranscriptionSegment", "TranscriptionTask", "TranscriptionWord"]
