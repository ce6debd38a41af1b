"""``POST /v1/audio/transcriptions``: OpenAI's transcription endpoint.

The multipart body is size-checked before it is read (``Content-Length`` first,
then Litestar counts streamed bytes against the handler's
``request_max_body_size``), so an oversized upload gets a 413 without being held
in memory. Audio is decoded by the ``flexserv_load_audio`` hook (the ``audio``
plugin) in a worker thread; the model comes from the registry.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated, Any, Literal

import msgspec
from litestar import Request, Response, post
from litestar.datastructures import UploadFile
from litestar.exceptions import ClientException
from litestar.exceptions.http_exceptions import RequestEntityTooLarge
from litestar.handlers import HTTPRouteHandler

from flexserv_core import hooks
from flexserv_core.api.body import UnsupportedMediaType, validate
from flexserv_core.api.transcription_formats import render
from flexserv_core.api.wire_schemas import TranscriptionForm, TranscriptionJson, TranscriptionVerboseJson
from flexserv_core.backends.base import TranscriptionModel
from flexserv_core.errors import FlexServError, InvalidRequest, PayloadTooLarge
from flexserv_core.plugin_manager import PluginStatus
from flexserv_core.server import FlexServer
from flexserv_core.settings import Settings

log = logging.getLogger(__name__)

ENDPOINT = "/v1/audio/transcriptions"
#: Room for the form's other fields and boundaries on top of the file itself.
MULTIPART_OVERHEAD = 64 * 1024

ResponseFormat = Literal["json", "text", "srt", "vtt", "verbose_json"]


class TranscriptionSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Limits of ``POST /v1/audio/transcriptions`` (declared by the built-in ``openai`` plugin)."""

    max_audio_bytes: Annotated[
        int, msgspec.Meta(ge=1, description="Largest audio upload in bytes; larger ones get a 413 (OpenAI: 25 MB).")
    ] = 25 * 1024 * 1024
    max_audio_seconds: Annotated[
        float, msgspec.Meta(gt=0, description="Longest audio, in seconds after decoding, a transcription accepts.")
    ] = 1800.0


class TranscriptionRequest(msgspec.Struct, kw_only=True):
    """The non-file fields of the multipart form (OpenAI's names)."""

    model: str | None = None
    language: str | None = None
    prompt: str | None = None
    temperature: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] = 0.0
    response_format: ResponseFormat = "json"


class NoAudioDecoder(FlexServError):
    """No loaded plugin implements ``flexserv_load_audio``."""

    status_code = 501
    error_type = "server_error"
    default_code = "audio_decoder_missing"


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"The audio upload is larger than this server's limit of {limit} bytes (--max-audio-bytes).", param="file"
    )


def _has_audio_decoder(server: FlexServer) -> bool:
    return any(
        info.status is PluginStatus.LOADED and "flexserv_load_audio" in info.hooks for info in server.pm.infos.values()
    )


async def _read_form(request: Request[Any, Any, Any], limit: int) -> dict[str, Any]:
    media_type, _ = request.content_type
    if media_type != "multipart/form-data":
        raise UnsupportedMediaType(
            f"Expected 'Content-Type: multipart/form-data' with a 'file' part, got '{media_type or 'none'}'."
        )
    announced = request.content_length
    if announced is not None and announced > limit + MULTIPART_OVERHEAD:
        raise _too_large(limit)
    try:
        form = await request.form()
    except RequestEntityTooLarge:
        raise _too_large(limit) from None
    except ClientException as exc:
        raise InvalidRequest(f"The multipart body could not be parsed: {exc.detail}", param="file") from None
    return dict(form.multi_items())


async def _read_file(upload: Any, limit: int) -> tuple[bytes, str | None, str | None]:
    if not isinstance(upload, UploadFile):
        raise InvalidRequest("'file' must be an uploaded file (a multipart part with a filename).", param="file")
    try:
        data = await upload.read(limit + 1)
    finally:
        await upload.close()
    if len(data) > limit:
        raise _too_large(limit)
    if not data:
        raise InvalidRequest("The uploaded file is empty.", param="file", code="invalid_audio")
    return data, upload.filename, upload.content_type


async def create_transcription(request: Request[Any, Any, Any]) -> Response[Any]:
    server: FlexServer = request.app.state.flexserv
    limits = server.settings.get(TranscriptionSettings)
    fields = await _read_form(request, limits.max_audio_bytes)
    if "file" not in fields:
        raise InvalidRequest("Missing the 'file' part: upload the audio as multipart field 'file'.", param="file")
    upload = fields.pop("file")
    data, filename, content_type = await _read_file(upload, limits.max_audio_bytes)
    if any(not isinstance(v, str) for v in fields.values()):
        bad = next(k for k, v in fields.items() if not isinstance(v, str))
        raise InvalidRequest(f"'{bad}' must be a plain form field, not a file.", param=bad)
    if "temperature" in fields:
        fields["temperature"] = _as_float(fields["temperature"], "temperature")
    for key in [k for k in fields if k.endswith("[]")]:
        fields[key[:-2]] = fields.pop(key)  # form arrays, e.g. timestamp_granularities[]
    params = validate(
        fields, TranscriptionRequest, block_unknown=server.settings.core.block_on_unexpected_fields, endpoint=ENDPOINT
    )
    if not _has_audio_decoder(server):
        raise NoAudioDecoder(
            "No plugin decodes audio: install and enable the 'audio' plugin (distribution flexserv-audio)."
        )
    async with server.registry.acquire(params.model, TranscriptionModel) as lease:
        model = lease.model
        rate = model.sampling_rate
        audio = await asyncio.to_thread(hooks.load_audio, server.pm, data, filename, content_type, rate)
        if audio is None:
            raise InvalidRequest(
                f"The uploaded file ({filename or 'unnamed'}) is not in an audio format any plugin decodes.",
                param="file",
                code="invalid_audio",
            )
        seconds = len(audio) / rate
        if seconds == 0:
            raise InvalidRequest("The uploaded audio contains no samples.", param="file", code="invalid_audio")
        if seconds > limits.max_audio_seconds:
            raise InvalidRequest(
                f"The audio is {seconds:.1f} s long; this server accepts at most {limits.max_audio_seconds:g} s (--max-audio-seconds).",
                param="file",
                code="audio_too_long",
            )
        result = await model.transcribe(
            audio, language=params.language, prompt=params.prompt, temperature=params.temperature
        )
    if not result.duration:
        result.duration = seconds
    server.metrics.transcription_audio_seconds.labels(lease.spec.name).inc(seconds)
    content, media_type = render(result, params.response_format)
    return Response(content=content, media_type=media_type, status_code=200)


def _as_float(value: str, param: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise InvalidRequest(f"Invalid value for '{param}': expected a number, got {value!r}.", param=param) from None


def routes(settings: Settings) -> list[HTTPRouteHandler]:
    """The route, with Litestar's body limit set from ``--max-audio-bytes``."""
    limit = settings.get(TranscriptionSettings).max_audio_bytes
    handler = post(
        ENDPOINT,
        status_code=200,
        summary="Transcribe audio",
        opt={
            "form": TranscriptionForm,
            "response": {
                "application/json": (TranscriptionJson, TranscriptionVerboseJson),
                "text/plain": None,
                "text/vtt": None,
            },
            "scope": "inference",
        },
        request_max_body_size=limit + MULTIPART_OVERHEAD,
    )(create_transcription)
    return [handler]
