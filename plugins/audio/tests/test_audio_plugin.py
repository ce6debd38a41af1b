"""The audio API is a plugin: on by default through its entry point, and
``-p no:audio`` removes its routes (an OpenAI-shaped 404) while chat and the model
list are still served. A tiny fake transcription model stands in for Whisper."""

from __future__ import annotations

import gc
import logging
import warnings
from pathlib import Path
from typing import Any

import pytest
from flexserv_audio import Transcription, TranscriptionModel
from flexserv_audio.routes import UNSUPPORTED
from flexserv_audio.schemas import TranscriptionSettings

from flexserv_core import (
    Backend,
    LoadedModel,
    ModelKind,
    ModelSpec,
    ProgressCallback,
    create_plugin_manager,
    hookimpl,
    resolve_plugin_settings,
)
from flexserv_core.testing import FakeBackendPlugin, app_client, make_app, make_plugin_manager

DATA = Path(__file__).resolve().parents[3] / "tests" / "data"
CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
ROUTES = ["/v1/audio/transcriptions", "/v1/audio/translations"]


class EchoTranscriber(TranscriptionModel):
    """Hears how long the audio is; translates too."""

    can_translate = True

    async def transcribe(self, audio: Any, **options: Any) -> Transcription:
        return Transcription(text=f"{len(audio) / self.sampling_rate:.1f} s {options.get('task', 'transcribe')}")

    def unload(self) -> None:
        pass


class FakeBackends:
    """A transcription model, offered as ``echo``."""

    class Loader(Backend):
        def __init__(self, name: str, kind: ModelKind, model: type[LoadedModel]) -> None:
            self.name, self.kind, self.model = name, kind, model

        def load(self, spec: ModelSpec, progress: ProgressCallback) -> LoadedModel:
            return self.model(spec)

    @hookimpl
    def flexserv_register_backends(self, settings: Any) -> list[Backend]:
        return [self.Loader("echo", ModelKind.TRANSCRIPTION, EchoTranscriber)]

    @hookimpl
    def flexserv_default_models(self, settings: Any) -> list[ModelSpec]:
        return [
            ModelSpec(name="echo", kind=ModelKind.TRANSCRIPTION, source="echo://", backend="echo", origin="embedded")
        ]


def upload() -> dict[str, Any]:
    return {"file": ("speech.ogg", (DATA / "speech.ogg").read_bytes(), "audio/ogg")}


def test_the_plugin_is_installed_on_by_default_and_blockable() -> None:
    """Through the real entry point, as ``flexserv run`` selects plugins."""
    loaded = create_plugin_manager()
    assert loaded.infos["audio"].distribution == "flexserv-audio"
    assert "flexserv_register_routes" in loaded.infos["audio"].hooks
    blocked = create_plugin_manager(["no:audio"])
    assert "flexserv_register_routes" not in blocked.infos["audio"].hooks


def test_the_settings_keep_their_core_names_as_aliases_and_are_ignored_when_blocked(tmp_path: Path) -> None:
    config = tmp_path / "flexserv.toml"
    config.write_text("audio_max_bytes = 10\nmax_audio_seconds = 3.0\n")
    limits = resolve_plugin_settings(make_plugin_manager(["audio"]), cli={}, env={}, config_file=config)
    assert limits.get(TranscriptionSettings) == TranscriptionSettings(audio_max_bytes=10, audio_max_seconds=3.0)
    # without the plugin, its prefixed settings are ignored with a warning, not an error
    config.write_text("audio_max_bytes = 10\n")
    env = {"FLEXSERV_AUDIO_MAX_SECONDS": "3"}
    blocked = resolve_plugin_settings(create_plugin_manager(["no:audio"]), cli={}, env=env, config_file=config)
    assert blocked.ignored == [("audio_max_bytes", "config file"), ("FLEXSERV_AUDIO_MAX_SECONDS", "environment")]


@pytest.mark.parametrize("path", ROUTES)
async def test_without_the_plugin_its_routes_are_404_and_the_rest_is_served(path: str) -> None:
    async with app_client(make_app([FakeBackendPlugin(), FakeBackends()], block=["audio"])) as client:
        gone = await client.post(path, files=upload(), data={"model": "echo"})
        assert gone.status_code == 404, gone.text
        assert gone.json()["error"]["type"] == "invalid_request_error"
        assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200
        assert (await client.get("/v1/models")).status_code == 200


@pytest.mark.parametrize(("path", "task"), [(ROUTES[0], "transcribe"), (ROUTES[1], "translate")])
async def test_with_the_plugin_the_routes_serve_and_count_the_audio(path: str, task: str) -> None:
    async with app_client(make_app([FakeBackends(), "audio"])) as client:
        r = await client.post(path, files=upload(), data={"model": "echo", "response_format": "text"})
        assert r.status_code == 200, r.text
        assert r.text == f"3.7 s {task}"
        metrics = (await client.get("/metrics")).text
        assert 'flexserv:transcription_audio_seconds_total{model_name="echo"} 3.7' in metrics


async def test_each_audio_request_logs_its_model_audio_and_duration(caplog: pytest.LogCaptureFixture) -> None:
    async with app_client(make_app([FakeBackends(), "audio"])) as client:
        with caplog.at_level(logging.INFO, logger="flexserv_audio.routes"):
            for path, stream in ((ROUTES[0], "false"), (ROUTES[0], "true"), (ROUTES[1], "false")):
                r = await client.post(path, files=upload(), data={"model": "echo", "stream": stream})
                assert r.status_code == 200, r.text
    lines = [r.getMessage() for r in caplog.records if r.name == "flexserv_audio.routes"]
    assert [line.split(" in ")[0] for line in lines] == [
        "transcription done: model echo, 3.7 s of audio",
        "transcription done: model echo, 3.7 s of audio",
        "translation done: model echo, 3.7 s of audio",
    ], lines


#: A value of each unsupported transcription parameter that a real client would send.
UNSUPPORTED_VALUES: dict[str, str] = {
    "include[]": "logprobs",
    "chunking_strategy": "auto",
    "known_speaker_names[]": "ada",
    "known_speaker_references[]": "data:audio/wav;base64,AAAA",
    "keywords[]": "FlexServ",
    "languages[]": "fr",
}


def test_every_unsupported_parameter_has_a_test_value() -> None:
    assert {k.removesuffix("[]") for k in UNSUPPORTED_VALUES} == set(UNSUPPORTED)


@pytest.mark.parametrize("field", sorted(UNSUPPORTED_VALUES))
async def test_an_unsupported_openai_parameter_is_refused_by_name(field: str) -> None:
    """Refused before any model is loaded or any audio decoded (the file is not audio)."""
    async with app_client(make_app([FakeBackends(), "audio"])) as client:
        files = {"file": ("a.wav", b"RIFF0000WAVE", "audio/wav")}
        r = await client.post(ROUTES[0], files=files, data={"model": "echo", field: UNSUPPORTED_VALUES[field]})
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert (error["param"], error["code"]) == (field.removesuffix("[]"), "unsupported_parameter"), error


@pytest.mark.parametrize("block", [False, True])
async def test_an_unknown_list_field_is_treated_as_any_unknown_field(block: bool) -> None:
    """The SDK sends every list as ``name[]``: one the server does not know is reported
    in ``X-FlexServ-Ignored-Fields``, or refused under ``--block-on-unexpected-fields``."""
    settings = {"block_on_unexpected_fields": block}
    async with app_client(make_app([FakeBackends(), "audio"], settings=settings)) as client:
        data = {"model": "echo", "response_format": "text", "hues[]": "red"}
        r = await client.post(ROUTES[0], files=upload(), data=data)
        if block:
            assert r.status_code == 400 and r.json()["error"]["param"] == "hues", r.text
        else:
            assert r.status_code == 200 and r.headers["x-flexserv-ignored-fields"] == "hues", r.text


async def test_a_refused_upload_leaves_no_spooled_file_open() -> None:
    """A field refused after the form was read (here a temperature that is not a number)
    and a second file part: their spooled uploads are closed, not left to the collector."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        async with app_client(make_app([FakeBackends(), "audio"])) as client:
            r = await client.post(ROUTES[0], files=upload(), data={"model": "echo", "temperature": "nan"})
            assert r.status_code == 400, r.text
            two = [("file", upload()["file"]), ("file", ("b.wav", b"x", "audio/wav"))]
            r = await client.post(ROUTES[0], files=two, data={"model": "echo", "response_format": "text"})
            assert r.status_code == 200, r.text
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
