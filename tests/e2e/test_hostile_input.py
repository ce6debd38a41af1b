"""Hostile input, as an attacker would send it: every answer a bounded OpenAI-shaped
4xx (or, where the input is legal, a bounded success), never a 5xx; the server
serves normally afterwards; and no file is opened because of what a request said.

Two runs of the same cases: in process under a Python audit hook that records
every ``open`` (fast), and over HTTP against a real ``flexserv run`` (slow).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from flexserv_core.testing import (
    FakeBackendPlugin,
    app_client,
    flexserv_cmd,
    free_port,
    make_app,
    stop_process,
    wait_healthy,
    write_distribution,
)

#: In every path-like hostile value, so an opened path derived from input is found.
MARK = "hostile7f3a"
#: Largest error body any case may get back.
MAX_ERROR_BYTES = 4096
USER = [{"role": "user", "content": "hi"}]
CHAT, COMPLETIONS, EMBEDDINGS = "/v1/chat/completions", "/v1/completions", "/v1/embeddings"

HOSTILE_MODELS: list[Any] = [
    f"../../etc/{MARK}",
    f"/etc/{MARK}",
    f"..\\..\\{MARK}",
    f"~/{MARK}",
    f"./{MARK}",
    f"{MARK}/../../../etc/passwd",
    f"file:///etc/{MARK}",
    f"http://127.0.0.1:9/{MARK}",
    f"hf://{MARK}/x",
    f"C:\\Windows\\{MARK}",
    f"\\\\server\\share\\{MARK}",
    f"%2e%2e%2f{MARK}",
    f"{MARK}\x00/etc/passwd",
    f"{MARK}\n\r\t",
    f"{MARK}-模型-😀-\u202e",
    MARK * 10_000,
    "..",
    "/",
    123,
    1.5,
    True,
    [],
    {"path": f"/etc/{MARK}"},
]


@dataclass
class Case:
    name: str
    path: str
    body: Any = None
    raw: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    ok: frozenset[int] = frozenset()  # statuses other than 4xx this case may get

    def request(self) -> dict[str, Any]:
        if self.raw is not None:
            return {"content": self.raw, "headers": {"content-type": "application/json", **self.headers}}
        return {"json": self.body, "headers": self.headers}


def _model_cases() -> Iterator[Case]:
    for i, model in enumerate(HOSTILE_MODELS):
        yield Case(f"chat-model-{i}", CHAT, {"model": model, "messages": USER, "max_tokens": 2})
        yield Case(f"completion-model-{i}", COMPLETIONS, {"model": model, "prompt": "a", "max_tokens": 2})
        yield Case(f"embedding-model-{i}", EMBEDDINGS, {"model": model, "input": "a"})
    for model in (None, ""):  # documented: the default model
        yield Case(
            f"chat-model-{model!r}", CHAT, {"model": model, "messages": USER, "max_tokens": 2}, ok=frozenset({200})
        )


def _wrong_types() -> Iterator[Case]:
    bad: dict[str, list[Any]] = {
        "messages": ["hi", 1, {}, [1], [[]], [{"role": 1}], [{"role": "user", "content": 1}], [{"role": "x" * 10**5}]],
        "max_tokens": ["1", -1, 0, 1.5, 10**9, 2**63, 2**64, 10**400, [], {}],
        "temperature": ["hot", -1, 3, [], 1e308],
        "top_p": [2, -0.1, "x"],
        "top_k": [-5, "x", [1]],
        "n": [0, 17, 10**6, "2", 1.5],
        "stop": [[""], [1], ["a"] * 100, "s" * 100_000, {"a": 1}, 5],
        "seed": [2**64, "x", 1.5],
        "stream": ["yes", 1, {}],
        "stream_options": [1, "x", {"include_usage": "x"}],
        "logprobs": ["x", 5],
        "top_logprobs": [100, -1, "x"],
        "presence_penalty": [5, "x"],
        "frequency_penalty": [-5, []],
        "max_completion_tokens": [0, "x", 10**12],
        "user": [1, [], {}],
    }
    for name, values in bad.items():
        for j, value in enumerate(values):
            body = {"messages": USER, "max_tokens": 2, name: value}
            yield Case(f"chat-{name}-{j}", CHAT, body)
    prompts: list[Any] = [[[[1]]], [1, "a"], [-1], [2**40], {}, None, 1, [], [[]], [""], [[1], "a"], "p" * 2_000_000]
    for j, prompt in enumerate(prompts):
        yield Case(f"completion-prompt-{j}", COMPLETIONS, {"prompt": prompt, "max_tokens": 2})
    for j, extra in enumerate([{"echo": "x"}, {"suffix": 1}, {"logprobs": 21}, {"n": 10, "prompt": ["a"] * 10}]):
        yield Case(f"completion-field-{j}", COMPLETIONS, {"prompt": "a", "max_tokens": 2, **extra})
    inputs: list[Any] = [None, [], [[]], {"a": 1}, [-1], [1.5], [[1, "a"]], ["x"] * 5000]
    for j, value in enumerate(inputs):
        yield Case(f"embedding-input-{j}", EMBEDDINGS, {"input": value})
    for j, extra in enumerate([{"dimensions": 0}, {"encoding_format": "xml"}, {"dimensions": "x"}]):
        yield Case(f"embedding-field-{j}", EMBEDDINGS, {"input": "a", **extra})


def _malformed() -> Iterator[Case]:
    for depth in (40, 10_000, 200_000):
        yield Case(f"deep-array-{depth}", CHAT, raw=b'{"messages": ' + b"[" * depth + b"]" * depth + b"}")
    yield Case("deep-object", CHAT, raw=b'{"a":' * 5000 + b"1" + b"}" * 5000)
    for j, raw in enumerate(
        [b"", b"not json", b"[]", b"null", b'"s"', b"1e999999", b"\xff\xfe\x00", b'{"messages": "\xff"}', b"{" * 3]
    ):
        yield Case(f"malformed-{j}", CHAT, raw=raw)
    yield Case("duplicate-keys", CHAT, raw=b'{"messages": 1, "messages": [], "max_tokens": 2}')
    yield Case("text-plain", CHAT, raw=b"{}", headers={"content-type": "text/plain"})
    yield Case("body-11MiB", CHAT, raw=b'{"messages": [{"role": "user", "content": "' + b"x" * (11 * 2**20) + b'"}]}')
    yield Case("prompt-2M-chars", CHAT, {"messages": [{"role": "user", "content": "x" * 2_000_000}]})
    yield Case("many-messages", CHAT, {"messages": USER * 5000, "max_tokens": 2})
    many_parts = [{"role": "user", "content": [{"type": "text", "text": "a"}] * 1000}]
    yield Case("many-parts", CHAT, {"messages": many_parts, "max_tokens": 2})
    yield Case("tool-message-bare", CHAT, {"messages": [{"role": "tool"}]})
    yield Case("assistant-bare", CHAT, {"messages": [*USER, {"role": "assistant"}]})
    yield Case("huge-n-tokens", CHAT, {"messages": USER, "n": 16, "max_tokens": 10**6})
    yield Case("unknown-route", "/v1/../../etc/passwd", {"x": 1})


CASES: list[Case] = [*_model_cases(), *_wrong_types(), *_malformed()]


def check_answer(case: Case, r: httpx.Response) -> None:
    assert r.status_code < 500, f"{case.name}: {r.status_code} {r.text[:300]}"
    if r.status_code in case.ok:
        assert len(r.content) < MAX_ERROR_BYTES * 4, case.name
        return
    assert 400 <= r.status_code < 500, f"{case.name}: {r.status_code} {r.text[:300]}"
    assert len(r.content) <= MAX_ERROR_BYTES, f"{case.name}: {len(r.content)} bytes"
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}, case.name
    assert isinstance(error["message"], str) and error["message"], case.name


def _get_model_case(model: str) -> Case:
    # "/" ends the path at /v1/models/: the model list, a harmless 200
    return Case(f"get-model-{model[:20]!r}", "/v1/models", ok=frozenset({200}) if model == "/" else frozenset())


async def _post(client: httpx.AsyncClient, case: Case) -> httpx.Response:
    return await client.post(case.path, **case.request())


# --- in process, under an audit hook ---------------------------------------------------

_recording: list[str] = []
_recording_on = threading.Event()
_hook_installed = False


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _recording_on.is_set() and event in ("open", "os.listdir", "os.scandir", "os.mkdir", "os.remove", "os.rename"):
        target = args[0] if args else None
        if isinstance(target, str | bytes | os.PathLike):
            _recording.append(os.fsdecode(target))


@contextmanager
def recorded_opens() -> Iterator[list[str]]:
    """Paths opened (or listed, created, removed) while the block runs; an audit hook
    cannot be removed, so it is installed once and switched by an event."""
    global _hook_installed
    if not _hook_installed:
        sys.addaudithook(_audit)
        _hook_installed = True
    _recording.clear()
    _recording_on.set()
    try:
        yield _recording
    finally:
        _recording_on.clear()


def _derived_from_input(path: str) -> bool:
    lowered = path.lower()
    return MARK in lowered or lowered.rstrip("/").endswith(("etc/passwd", "win.ini", "share"))


async def test_no_file_is_opened_because_of_a_request() -> None:
    fake = FakeBackendPlugin()
    app = make_app([fake, "audio", "embeddings"])
    async with app_client(app) as client:
        r = await client.post(CHAT, json={"messages": USER, "max_tokens": 1})  # load the model outside the recording
        assert r.status_code == 200
        with recorded_opens() as opened:
            assert _derived_from_input(f"/x/{MARK}")  # the detector itself works
            failures = []
            for case in CASES:
                try:
                    check_answer(case, await _post(client, case))
                except AssertionError as exc:
                    failures.append(str(exc).splitlines()[0])
            assert not failures, "\n".join(failures)
            for model in HOSTILE_MODELS:
                if isinstance(model, str) and len(model) < 4000:
                    check_answer(_get_model_case(model), await client.get(f"/v1/models/{quote(model, safe='')}"))
            files = {"file": (f"../../{MARK}.wav", b"RIFF....WAVE", "audio/wav")}
            r = await client.post("/v1/audio/transcriptions", data={"model": f"/etc/{MARK}"}, files=files)
            check_answer(Case("transcription", "/v1/audio/transcriptions"), r)
        suspicious = [p for p in opened if _derived_from_input(p)]
        assert not suspicious, suspicious
        r = await client.post(CHAT, json={"messages": USER, "max_tokens": 3})
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "The"


# --- over HTTP, against ``flexserv run`` ------------------------------------------------

FAKE_PLUGIN = """
from flexserv_core.testing import FakeBackendPlugin

_plugin = FakeBackendPlugin()
flexserv_register_backends = _plugin.flexserv_register_backends
flexserv_default_models = _plugin.flexserv_default_models
"""


@pytest.mark.slow  # starts flexserv as a process
async def test_hostile_input_over_http_against_a_real_server(tmp_path: Path) -> None:
    root = write_distribution(tmp_path / "dist", "hostile-fake", "hostilefake", "hostilefake_plugin", FAKE_PLUGIN)
    env = {
        **os.environ,
        "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "FLEXSERV_DISABLE_PLUGIN_AUTOLOAD": "1",
        "FLEXSERV_CACHE_DIR": str(tmp_path / "cache"),
    }
    port = free_port()
    cmd = flexserv_cmd("run", "--port", str(port), "-p", "hostilefake", "-p", "embeddings", "--log-level", "warning")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, proc)
        started = time.monotonic()
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            for case in CASES:
                check_answer(case, await _post(client, case))
            for model in HOSTILE_MODELS:
                if isinstance(model, str) and len(model) < 4000 and "\x00" not in model:
                    r = await client.get(f"/v1/models/{quote(model, safe='')}")
                    check_answer(_get_model_case(model), r)
            elapsed = time.monotonic() - started
            r = await client.post(CHAT, json={"messages": USER, "max_tokens": 3, "stream": True})
            assert r.status_code == 200 and r.text.rstrip().endswith("data: [DONE]")
            health = (await client.get("/v1/flexserv/health")).json()
            assert health["status"] == "ok", json.dumps(health)[:500]
        assert proc.poll() is None, "the server is still running"
        assert elapsed < 120, f"{len(CASES)} hostile requests took {elapsed:.0f} s"
    finally:
        stop_process(proc)
    assert proc.returncode == 0
