"""One streamed request against an OpenAI-compatible server, timed.

The request is sent with ``stream: true`` and ``stream_options.include_usage``;
the server-sent events are read line by line. Times come from
:func:`time.perf_counter`: time to first token (the first event that carries
text), the gaps between text events, and the end-to-end latency (until
``[DONE]`` or the end of the body: some servers send no ``[DONE]``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

Endpoint = Literal["chat", "completions"]

PATHS: dict[str, str] = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """What every request of a run shares, apart from its prompt."""

    model: str
    endpoint: Endpoint = "chat"
    max_tokens: int = 64
    temperature: float = 0.0
    system_prompt: str = ""
    timeout: float = 300.0
    #: Extra top-level body fields (e.g. a peer's ``repeat_penalty``); they cannot
    #: replace the fields the benchmark itself sets.
    extra_body: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class RequestResult:
    """One request's measurements. ``error_kind`` is None for a success."""

    started: float
    ttft: float | None = None
    e2e: float | None = None
    itls: list[float] = field(default_factory=list)
    output_tokens: int = 0
    usage_tokens: int | None = None
    text: str = ""
    status: int | None = None
    error_kind: str | None = None
    error_message: str | None = None

    @property
    def ok(self) -> bool:
        return self.error_kind is None


def request_body(spec: RequestSpec, prompt: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        **spec.extra_body,
        "model": spec.model,
        "max_tokens": spec.max_tokens,
        "temperature": spec.temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if spec.endpoint == "chat":
        messages = [{"role": "system", "content": spec.system_prompt}] if spec.system_prompt else []
        body["messages"] = [*messages, {"role": "user", "content": prompt}]
    else:
        body["prompt"] = f"{spec.system_prompt}\n\n{prompt}" if spec.system_prompt else prompt
    return body


def _event_text(event: dict[str, Any], endpoint: Endpoint) -> str:
    parts: list[str] = []
    for choice in event.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        if endpoint == "chat":
            delta = choice.get("delta") or {}
            content = delta.get("content") if isinstance(delta, dict) else None
        else:
            content = choice.get("text")
        if isinstance(content, str):
            parts.append(content)
    return "".join(parts)


def _error_message(body: bytes) -> str:
    """The ``error.message`` of an OpenAI-shaped error body, else the body's start."""
    try:
        data = json.loads(body)
    except ValueError:
        return body[:200].decode("utf-8", "replace").strip() or "(empty body)"
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and isinstance(message := error.get("message"), str):
        return message
    if isinstance(error, str):
        return error
    if isinstance(data, dict) and isinstance(detail := data.get("detail"), str):
        return detail
    return body[:200].decode("utf-8", "replace")


async def stream_request(
    client: httpx.AsyncClient,
    spec: RequestSpec,
    prompt: str,
    on_token: Callable[[], None] | None = None,
) -> RequestResult:
    """Send one streamed request and time it. Never raises for server or network
    failures: they end up in ``error_kind`` (``http_<status>``, ``timeout``,
    ``connect``, ``network``, ``stream_error``, ``bad_event``, ``empty``)."""
    result = RequestResult(started=time.perf_counter())
    try:
        async with asyncio.timeout(spec.timeout):
            await _run(client, spec, prompt, result, on_token)
    except TimeoutError:
        _fail(result, "timeout", f"no complete answer within {spec.timeout:g} s")
    except httpx.TimeoutException as exc:
        _fail(result, "timeout", f"{type(exc).__name__}: {exc}")
    except httpx.ConnectError as exc:
        _fail(result, "connect", str(exc) or type(exc).__name__)
    except httpx.HTTPError as exc:
        _fail(result, "network", f"{type(exc).__name__}: {exc}")
    if result.ok and result.output_tokens == 0 and result.usage_tokens is None:
        _fail(result, "empty", "the stream ended without any text or usage")
    if result.ok:
        result.e2e = time.perf_counter() - result.started
    return result


def _fail(result: RequestResult, kind: str, message: str) -> None:
    if result.error_kind is None:
        result.error_kind, result.error_message = kind, message


async def _run(
    client: httpx.AsyncClient,
    spec: RequestSpec,
    prompt: str,
    result: RequestResult,
    on_token: Callable[[], None] | None,
) -> None:
    async with client.stream("POST", PATHS[spec.endpoint], json=request_body(spec, prompt)) as response:
        result.status = response.status_code
        if response.status_code != 200:
            _fail(result, f"http_{response.status_code}", _error_message(await response.aread()))
            return
        last: float | None = None
        chunks = 0
        pieces: list[str] = []
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue  # blank separators, comments, "event:" lines
            data = line[5:].strip()
            if data == "[DONE]":
                break
            try:
                event = json.loads(data)
            except ValueError:
                _fail(result, "bad_event", f"not JSON: {data[:120]!r}")
                return
            if not isinstance(event, dict):
                continue
            if "error" in event:
                error = event["error"]
                message = error.get("message") if isinstance(error, dict) else str(error)
                _fail(result, "stream_error", str(message))
                return
            usage = event.get("usage")
            if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
                result.usage_tokens = usage["completion_tokens"]
            text = _event_text(event, spec.endpoint)
            if not text:
                continue
            now = time.perf_counter()
            if last is None:
                result.ttft = now - result.started
            else:
                result.itls.append(now - last)
            last = now
            chunks += 1
            pieces.append(text)
            if on_token is not None:
                on_token()
        result.text = "".join(pieces)
        result.output_tokens = result.usage_tokens if result.usage_tokens is not None else chunks
