"""``POST /v1/audio/transcriptions`` and ``/v1/audio/translations``: OpenAI's audio endpoints.

The multipart body is size-checked before it is read (``Content-Length`` first,
then Litestar counts streamed bytes against the handler's
``request_max_body_size``), so an oversized upload gets a 413 without being held
in memory. Audio is decoded (:mod:`flexserv_audio.decode`) in a worker thread,
once the request has its share of the decoded-audio budget
(:mod:`flexserv_audio.budget`), held until the model is done with it; the model
comes from the registry. ``-p no:audio`` removes these routes (404).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, Final, TypeVar

import msgspec
from flexserv_batching import Share
from litestar import Request, Response, post
from litestar.datastructures import UploadFile
from litestar.exceptions.http_exceptions import RequestEntityTooLarge
from litestar.handlers import HTTPRouteHandler

from flexserv_audio import Transcription, TranscriptionModel
from flexserv_audio.budget import audio_budget, milliseconds
from flexserv_audio.decode import load_audio
from flexserv_audio.form import parse_form
from flexserv_audio.formats import render
from flexserv_audio.metrics import audio_seconds
from flexserv_audio.schemas import (
    TranscriptionForm,
    TranscriptionJson,
    TranscriptionRequest,
    TranscriptionSettings,
    TranscriptionStreamEvent,
    TranscriptionVerboseJson,
    TranslationForm,
    TranslationRequest,
)
from flexserv_core import (
    READY,
    SSE_DONE,
    FlexServer,
    InvalidRequest,
    PayloadTooLarge,
    Refusals,
    Settings,
    SSEGenerator,
    UnsupportedMediaType,
    error_event,
    refuse_unsupported,
    sse_event,
    sse_response,
    until_disconnect,
    validate_body,
)

log = logging.getLogger(__name__)
RequestT = TypeVar("RequestT", bound=msgspec.Struct)
T = TypeVar("T")

ENDPOINT = "/v1/audio/transcriptions"
TRANSLATIONS = "/v1/audio/translations"
#: Room for the form's other fields and boundaries on top of the file itself.
MULTIPART_OVERHEAD = 64 * 1024


def _never(value: Any) -> bool:
    """Neutral only when absent or null."""
    return value is None


#: OpenAI parameters of the transcription endpoint that are not served: sent with a
#: value, a 400 naming them (code ``unsupported_parameter``), never dropped silently.
UNSUPPORTED: Final[Refusals] = {
    "include": (_never, "'include' (token logprobs) is not supported"),
    "chunking_strategy": (_never, "'chunking_strategy' is not supported"),
    "known_speaker_names": (_never, "speaker diarization is not supported"),
    "known_speaker_references": (_never, "speaker diarization is not supported"),
    "keywords": (_never, "keyword hints are not supported; send them in 'prompt'"),
    "languages": (_never, "a list of candidate languages is not supported; send one 'language'"),
}


def check_parameters(fields: dict[str, Any]) -> None:
    """Refuse the unsupported OpenAI parameters (in place: a neutral one is removed)."""
    refuse_unsupported(fields, UNSUPPORTED)


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"The audio upload is larger than this server's limit of {limit} bytes (--audio-max-bytes).", param="file"
    )


async def _read_form(request: Request[Any, Any, Any], limit: int) -> list[tuple[str, Any]]:
    media_type, _ = request.content_type
    if media_type != "multipart/form-data":
        raise UnsupportedMediaType(
            f"Expected 'Content-Type: multipart/form-data' with a 'file' part, got '{media_type or 'none'}'."
        )
    announced = request.content_length
    if announced is not None and announced > limit + MULTIPART_OVERHEAD:
        raise _too_large(limit)
    try:
        return await parse_form(request, uploads={"file"})
    except RequestEntityTooLarge:
        raise _too_large(limit) from None


async def _read_file(upload: UploadFile, limit: int) -> tuple[bytes, str | None]:
    try:
        data = await upload.read(limit + 1)
    finally:
        await upload.close()
    if len(data) > limit:
        raise _too_large(limit)
    if not data:
        raise InvalidRequest("The uploaded file is empty.", param="file", code="invalid_audio")
    return data, upload.filename


#: Multipart fields whose value is a list: OpenAI's SDK sends ``name[]`` once per item,
#: other clients repeat ``name``. Any other ``name[]`` is gathered as a list too, so that
#: validation refuses it (:data:`UNSUPPORTED`) or treats it as any unknown field.
LIST_FIELDS = frozenset(
    {"timestamp_granularities", "include", "known_speaker_names", "known_speaker_references", "keywords", "languages"}
)
BOOL_FIELDS = frozenset({"stream"})


class AudioRequest(msgspec.Struct, kw_only=True):
    """A decoded upload, ready for a model's ``transcribe``."""

    audio: Any
    seconds: float


def _form_fields(items: list[tuple[str, Any]]) -> tuple[UploadFile, dict[str, Any]]:
    """The ``file`` part and the other fields, list fields gathered (``name[]`` or repeated ``name``)."""
    uploads = [value for key, value in items if key == "file"]
    if not uploads:
        raise InvalidRequest("Missing the 'file' part: upload the audio as multipart field 'file'.", param="file")
    upload = uploads[0]
    if not isinstance(upload, UploadFile):
        raise InvalidRequest("'file' must be an uploaded file (a multipart part with a filename).", param="file")
    fields: dict[str, Any] = {}
    for key, value in items:
        name = key.removesuffix("[]")
        if key == "file":
            continue
        if not isinstance(value, str):
            raise InvalidRequest(f"'{name}' must be a plain form field, not a file.", param=name)
        if name in LIST_FIELDS or key.endswith("[]"):
            fields.setdefault(name, []).append(value)
        else:
            fields[name] = value
    for name in BOOL_FIELDS & fields.keys():
        fields[name] = _as_bool(fields[name], name)
    if "temperature" in fields:
        fields["temperature"] = _as_float(fields["temperature"], "temperature")
    return upload, fields


async def _in_thread(fn: Callable[[], T]) -> T:
    """``fn()`` in a worker thread. Cancelled, it still waits for the thread, whose
    result is the memory the caller's budget share stands for until then."""
    job = asyncio.ensure_future(asyncio.to_thread(fn))
    try:
        return await asyncio.shield(job)
    except asyncio.CancelledError:
        await asyncio.wait({job})
        if not job.cancelled():
            job.exception()  # nobody waits for its error now: don't log it as unretrieved
        raise


async def _decoded_audio(
    server: FlexServer, model: TranscriptionModel, data: bytes, filename: str | None, share: Share
) -> AudioRequest:
    """``data`` decoded under ``share`` (reserved for the longest audio), shrunk to the audio's length."""
    limit = server.settings.get(TranscriptionSettings).audio_max_seconds
    rate = model.sampling_rate
    audio = await _in_thread(lambda: load_audio(data, rate, filename=filename, max_seconds=limit))
    seconds = len(audio) / rate
    share.shrink(milliseconds(seconds))
    return AudioRequest(audio=audio, seconds=seconds)


def _reservation(server: FlexServer) -> int:
    """What a request's share is before it is decoded: its length is not known until then."""
    return milliseconds(server.settings.get(TranscriptionSettings).audio_max_seconds)


async def _transcribed(
    server: FlexServer, model: TranscriptionModel, data: bytes, filename: str | None, **options: Any
) -> tuple[Transcription, float]:
    """The transcription of ``data`` and the seconds of audio it had, decoded once
    the budget has room and held in it until ``transcribe`` returns."""
    async with audio_budget(server).hold(_reservation(server)) as share:
        decoded = await _decoded_audio(server, model, data, filename, share)
        result = await model.transcribe(decoded.audio, **options)
    if not result.duration:
        result.duration = decoded.seconds
    return result, decoded.seconds


async def _read_upload(
    request: Request[Any, Any, Any], schema: type[RequestT], endpoint: str
) -> tuple[FlexServer, RequestT, tuple[bytes, str | None]]:
    server: FlexServer = request.app.state.flexserv
    limits = server.settings.get(TranscriptionSettings)
    form = await _read_form(request, limits.audio_max_bytes)
    try:
        upload, fields = _form_fields(form)
        file = await _read_file(upload, limits.audio_max_bytes)
    finally:  # every spooled upload, also when a field is refused or a second file part came along
        for _, value in form:
            if isinstance(value, UploadFile):
                await value.close()
    check_parameters(fields)
    block = server.settings.core.block_on_unexpected_fields
    params = validate_body(fields, schema, block_unknown=block, endpoint=endpoint)
    return server, params, file


def _check_transcription(params: TranscriptionRequest) -> None:
    if params.timestamp_granularities and params.response_format != "verbose_json":
        raise InvalidRequest(
            "'timestamp_granularities' needs 'response_format' verbose_json.", param="timestamp_granularities"
        )
    if params.stream and params.response_format not in ("json", "text"):
        raise InvalidRequest(
            f"'stream' is served with response_format json or text, not {params.response_format!r}.", param="stream"
        )


def _served(server: FlexServer, model: str, task: str, seconds: float, started: float) -> None:
    """Counted on /metrics, and one log line: the access log says only the status."""
    audio_seconds(server.settings).labels(model).inc(seconds)
    took = time.perf_counter() - started
    log.info("%s done: model %s, %.1f s of audio in %.2f s", task, model, seconds, took)


async def create_transcription(request: Request[Any, Any, Any]) -> Response[Any]:
    started = time.perf_counter()
    server, params, (data, filename) = await _read_upload(request, TranscriptionRequest, ENDPOINT)
    _check_transcription(params)
    if params.stream:
        return await sse_response(_stream(server, params, data, filename, started), server, request)
    granularities = set(params.timestamp_granularities)
    options: dict[str, Any] = {"word_timestamps": True} if "word" in granularities else {}
    async with server.registry.acquire(params.model, TranscriptionModel) as lease:
        result, seconds = await until_disconnect(
            request,
            _transcribed(
                server,
                lease.model,
                data,
                filename,
                language=params.language,
                prompt=params.prompt,
                temperature=params.temperature,
                **options,
            ),
        )
    _served(server, lease.spec.name, "transcription", seconds, started)
    segments = not granularities or "segment" in granularities
    content, media_type = render(result, params.response_format, segments=segments)
    return Response(content=content, media_type=media_type, status_code=200)


async def _stream(
    server: FlexServer, params: TranscriptionRequest, data: bytes, filename: str | None, started: float
) -> SSEGenerator:
    """OpenAI's ``transcript.text.delta`` events, one per decoded segment, then
    ``transcript.text.done``; the deltas join to the done event's text, which is
    the text a non-streamed request gets."""
    async with (
        server.registry.acquire(params.model, TranscriptionModel) as lease,
        audio_budget(server).hold(_reservation(server)) as share,
    ):
        decoded = await _decoded_audio(server, lease.model, data, filename, share)
        segments = lease.model.transcribe_stream(
            decoded.audio, language=params.language, prompt=params.prompt, temperature=params.temperature
        )
        yield READY
        joiner = DeltaJoiner()
        # closing the segments (a disconnect, the shutdown cut) stops the decode
        close = getattr(segments, "aclose", None)
        try:
            async for segment in segments:
                delta = joiner.add(segment.text)
                if delta:
                    yield sse_event(msgspec.json.encode({"type": "transcript.text.delta", "delta": delta}))
        except Exception as exc:
            yield error_event(exc)
            yield SSE_DONE
            return
        finally:
            if close is not None:
                await close()
        _served(server, lease.spec.name, "transcription", decoded.seconds, started)
        yield sse_event(msgspec.json.encode({"type": "transcript.text.done", "text": joiner.text}))
        yield SSE_DONE


class DeltaJoiner:
    """Segment texts -> deltas whose concatenation is the stripped full text, as
    the non-streamed ``text`` is: leading space dropped, trailing space held
    back until more text follows."""

    def __init__(self) -> None:
        self.text = ""
        self._held = ""

    def add(self, piece: str) -> str:
        if not self.text:
            piece = piece.lstrip()
        body = piece.rstrip()
        if not body:
            self._held += piece
            return ""
        delta = self._held + body
        self._held = piece[len(body) :]
        self.text += delta
        return delta


async def create_translation(request: Request[Any, Any, Any]) -> Response[Any]:
    started = time.perf_counter()
    server, params, (data, filename) = await _read_upload(request, TranslationRequest, TRANSLATIONS)
    async with server.registry.acquire(params.model, TranscriptionModel) as lease:
        if not lease.model.can_translate:
            raise InvalidRequest(
                f"The model '{lease.spec.name}' cannot translate (an English-only model); "
                "serve a multilingual Whisper model for /v1/audio/translations.",
                param="model",
                code="translation_unsupported",
            )
        result, seconds = await until_disconnect(
            request,
            _transcribed(
                server,
                lease.model,
                data,
                filename,
                prompt=params.prompt,
                temperature=params.temperature,
                task="translate",
            ),
        )
    _served(server, lease.spec.name, "translation", seconds, started)
    content, media_type = render(result, params.response_format, task="translate")
    return Response(content=content, media_type=media_type, status_code=200)


def _as_bool(value: str, param: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1"):
        return True
    if lowered in ("false", "0", ""):
        return False
    raise InvalidRequest(f"Invalid value for '{param}': expected true or false, got {value!r}.", param=param)


def _as_float(value: str, param: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise InvalidRequest(f"Invalid value for '{param}': expected a number, got {value!r}.", param=param) from None


def routes(settings: Settings) -> list[HTTPRouteHandler]:
    """The routes, with Litestar's body limit set from ``--audio-max-bytes``."""
    limit = settings.get(TranscriptionSettings).audio_max_bytes
    formats: dict[str, Any] = {
        "application/json": (TranscriptionJson, TranscriptionVerboseJson),
        "text/plain": None,
        "text/vtt": None,
    }
    transcriptions = post(
        ENDPOINT,
        status_code=200,
        summary="Transcribe audio",
        opt={"form": TranscriptionForm, "response": formats, "stream": TranscriptionStreamEvent, "scope": "inference"},
        request_max_body_size=limit + MULTIPART_OVERHEAD,
    )(create_transcription)
    translations = post(
        TRANSLATIONS,
        status_code=200,
        summary="Translate audio into English",
        opt={"form": TranslationForm, "response": formats, "scope": "inference"},
        request_max_body_size=limit + MULTIPART_OVERHEAD,
    )(create_translation)
    return [transcriptions, translations]
