"""Responses ``input_image`` parts -> the chat path's ``image_url`` parts, and their loading.

OpenAI's Responses API sends an image as ``{"type": "input_image", "image_url":
"data:..." | "https://...", "detail": "auto"}`` inside a user message's content;
the chat path takes it as ``{"type": "image_url", "image_url": {"url": ...}}``.
Loading and the text-only-model check are the chat path's
(the core's text session, through the ``flexserv_load_image`` hook).
"""

from __future__ import annotations

from typing import Any

from flexserv_core import InvalidRequest
from flexserv_responses.schemas import InputImage, InputText, OutputText

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


def chat_content(text: str, parts: list[InputText | OutputText | InputImage]) -> str | list[dict[str, Any]]:
    """A message's chat content: its joined ``text``, or parts when it has an image."""
    if not any(isinstance(part, InputImage) for part in parts):
        return text
    out: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, InputImage):
            out.append({"type": "image_url", "image_url": {"url": part.image_url, "detail": part.detail}})
        else:
            out.append({"type": "text", "text": part.text})
    return out
