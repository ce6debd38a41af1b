"""The testing kit in a project of its own: no asyncio configuration, no warnings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # runs pytest as a process

OUTSIDE_TESTS = """
import pytest

from flexserv_core import hookimpl
from flexserv_core.testing import FakeBackendPlugin

FAKE = FakeBackendPlugin()


class Shout:
    @hookimpl
    def flexserv_preprocess_request(self, endpoint, body, context):
        for message in body.get("messages", []):
            message["content"] = message["content"].upper()


@pytest.fixture
def flexserv_plugins():
    return [Shout(), FAKE]


@pytest.fixture
def chat(flexserv_openai):  # a project fixture on top of the kit's
    async def ask(text):
        return await flexserv_openai.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": text}], max_tokens=3
        )

    return ask


async def test_chat_sees_the_preprocessed_prompt(flexserv_openai):
    completion = await flexserv_openai.chat.completions.create(
        model="fake-model", messages=[{"role": "user", "content": "hi"}], max_tokens=3
    )
    assert completion.choices[0].message.content == "The"
    assert FAKE.last_prompt == "user: HI\\nassistant: "


async def test_through_a_project_fixture(chat):
    assert (await chat("yo")).choices[0].message.content == "The"
    assert FAKE.requests[-1].prompt.startswith("user: YO")


async def test_retrieve_a_model(flexserv_client):
    response = await flexserv_client.get("/v1/models/fake-model")
    assert response.json()["id"] == "fake-model"
"""


def test_kit_runs_in_an_outside_project_without_asyncio_config(tmp_path: Path) -> None:
    project = tmp_path / "outside-plugin"
    project.mkdir()
    (project / "pytest.ini").write_text("[pytest]\n")  # its own rootdir: nothing from this repository's config
    (project / "test_outside.py").write_text(OUTSIDE_TESTS)
    # Every warning is an error (the Litestar deprecation from the core's routes among
    # them, and pytest-asyncio's "loop scope unset", which the kit answers for the project)
    warning_filters = ["-W", "error"]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *warning_filters],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "3 passed" in output
    assert "LitestarDeprecationWarning" not in output
    assert "asyncio_default_fixture_loop_scope" not in output
