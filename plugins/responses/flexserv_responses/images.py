"""Responses ``input_image`` and ``input_file`` parts -> the chat path's ``image_url`` and ``file`` parts.

OpenAI's Responses API sends an image as ``{"type": "input_image", "image_url":
"data:..." | "https://...", "detail": "auto"}`` inside a user message's content;
the chat path takes it as ``{"type": "image_url", "image_url": {"url": ...}}``.
A document is ``{"type": "input_file", "file_id": ...}`` or ``{"type":
"input_file", "file_data": "data:application/pdf;base64,...", "filename": ...}``;
the chat path takes it as ``{"type": "file", "file": {...}}``. Loading, reading
and the text-only-model check are the chat path's (the core's text session,
through the ``flexserv_expand_file_parts`` and ``flexserv_load_image`` hooks).
"""

from __future__ import annotations

from typing import Any

from flexserv_core import InvalidRequest
from flexserv_responses.schemas import InputFile, InputImage, InputText, OutputText

DETAILS = ("auto", "low", "high")


def input_image(part: dict[str, Any], param: str) -> InputImage:
    """Check one ``input_image`` part (``param`` is its path, ``input[i].content[j]``)."""
    url = part.get("image_url")
    if part.get("file_id") is not None:
        raise InvalidRequest(
            "'file_id' images are not supported (there is no Files API); send 'image_url' (a data: URL).",
            param=f"{param}.file_id",
            code="unsupported_parameter",
        )
    if not isinstance(url, str) or not url:
        raise InvalidRequest(
            f"'{param}.image_url' must be a string (a data: URL or an http(s) URL).",
            param=f"{param}.image_url",
            code="invalid_value",
        )
    detail = part.get("detail") or "auto"
    if detail not in DETAILS:
        raise InvalidRequest(
            f"'{param}.detail' must be one of {', '.join(DETAILS)}.", param=f"{param}.detail", code="invalid_value"
        )
    return InputImage(image_url=url, detail=detail)


def input_file(part: dict[str, Any], param: str) -> InputFile:
    """Check one ``input_file`` part: exactly one of ``file_id`` and ``file_data``, strings."""
    fields = {key: part.get(key) for key in ("file_id", "file_data", "filename")}
    if part.get("file_url") is not None:
        raise InvalidRequest(
            "'file_url' documents are not supported (the server fetches no URLs); upload the file to /v1/files"
            " and send 'file_id', or send 'file_data'.",
            param=f"{param}.file_url",
            code="unsupported_parameter",
        )
    for key, value in fields.items():
        if value is not None and not isinstance(value, str):
            raise InvalidRequest(f"'{param}.{key}' must be a string.", param=f"{param}.{key}", code="invalid_value")
    if (fields["file_id"] is None) == (fields["file_data"] is None):
        raise InvalidRequest(
            f"'{param}' needs exactly one of 'file_id' or 'file_data'.", param=param, code="invalid_value"
        )
    return InputFile(file_id=fields["file_id"], file_data=fields["file_data"], filename=fields["filename"])


def chat_content(text: str, parts: list[InputText | OutputText | InputImage | InputFile]) -> str | list[dict[str, Any]]:
    """A message's chat content: its joined ``text``, or parts when it has an image or a file."""
    if not any(isinstance(part, InputImage | InputFile) for part in parts):
        return text
    out: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, InputImage):
            out.append({"type": "image_url", "image_url": {"url": part.image_url, "detail": part.detail}})
        elif isinstance(part, InputFile):
            reference = {"file_id": part.file_id, "file_data": part.file_data, "filename": part.filename}
            out.append({"type": "file", "file": {k: v for k, v in reference.items() if v is not None}})
        else:
            out.append({"type": "text", "text": part.text})
    return out
