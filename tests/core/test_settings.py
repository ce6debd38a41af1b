"""Settings precedence (CLI > env > config file > defaults) and validation."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import msgspec
import pytest

from flexserv_core.errors import UsageError
from flexserv_core.settings import CoreSettings, resolve_settings


class PluginSettings(msgspec.Struct, kw_only=True):
    demo_threshold: Annotated[float, msgspec.Meta(ge=0, le=100, description="A threshold.")] = 90.0
    demo_secret: Annotated[str | None, msgspec.Meta(description="A token.", extra={"secret": True})] = None
    demo_cli_only: Annotated[bool, msgspec.Meta(description="Dangerous.", extra={"cli_only": True})] = False


STRUCTS = [CoreSettings, PluginSettings]


def test_defaults() -> None:
    s = resolve_settings(STRUCTS, cli={}, env={})
    assert s.core.port == 8000
    assert s.get(PluginSettings).demo_threshold == 90.0


def test_precedence_cli_over_env_over_file(tmp_path: Path) -> None:
    config = tmp_path / "flexserv.toml"
    config.write_text('port = 7000\nhost = "0.0.0.0"\ndemo_threshold = 50\nlog_level = "debug"\n')
    env = {"FLEXSERV_PORT": "7100", "FLEXSERV_HOST": "127.0.0.2"}
    s = resolve_settings(STRUCTS, cli={"port": "7200"}, env=env, config_file=config)
    assert s.core.port == 7200 and s.origins["port"] == "cli"
    assert s.core.host == "127.0.0.2" and s.origins["host"] == "env"
    assert s.get(PluginSettings).demo_threshold == 50 and s.origins["demo_threshold"] == "config"
    assert s.core.log_level == "debug"


def test_env_lists_and_bools() -> None:
    env = {"FLEXSERV_MODEL": "a=x, b=y", "FLEXSERV_ALLOW_HUB_MODELS": "true"}
    s = resolve_settings(STRUCTS, cli={}, env=env)
    assert s.core.model == ["a=x", "b=y"]
    assert s.core.allow_hub_models is True


@pytest.mark.parametrize(
    ("cli", "env", "needle"),
    [
        ({"port": "eighty"}, {}, "'port' (--port)"),
        ({}, {"FLEXSERV_DEMO_THRESHOLD": "120"}, "'demo_threshold' (FLEXSERV_DEMO_THRESHOLD)"),
        ({"log_level": "loud"}, {}, "'log_level'"),
    ],
)
def test_invalid_values_name_the_setting(cli: dict, env: dict, needle: str) -> None:
    with pytest.raises(UsageError) as exc:
        resolve_settings(STRUCTS, cli=cli, env=env)
    assert needle in str(exc.value)


def test_cli_only_setting_ignores_env_and_file(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("demo_cli_only = true\n")
    s = resolve_settings(STRUCTS, cli={}, env={"FLEXSERV_DEMO_CLI_ONLY": "1"}, config_file=config)
    assert s.get(PluginSettings).demo_cli_only is False
    assert resolve_settings(STRUCTS, cli={"demo_cli_only": True}, env={}).get(PluginSettings).demo_cli_only is True


def test_unknown_key_and_bad_toml(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("nope = 1\n")
    with pytest.raises(UsageError, match="unknown setting"):
        resolve_settings(STRUCTS, cli={}, env={}, config_file=config)
    config.write_text("port = \n")
    with pytest.raises(UsageError, match="not valid TOML"):
        resolve_settings(STRUCTS, cli={}, env={}, config_file=config)


@pytest.mark.parametrize(
    "make",
    [lambda p: p.mkdir(), lambda p: p.write_bytes(b"\xff\xfeport = 1\n")],
    ids=["a-directory", "not-utf-8"],
)
def test_a_config_file_that_cannot_be_read_is_a_usage_error(tmp_path: Path, make: Callable[[Path], object]) -> None:
    # a directory or a file that is not UTF-8: one line naming the file, never a traceback
    config = tmp_path / "flexserv.toml"
    make(config)
    with pytest.raises(UsageError, match=r"config file .*flexserv\.toml"):
        resolve_settings(STRUCTS, cli={}, env={}, config_file=config)


def test_summary_masks_secrets() -> None:
    s = resolve_settings(STRUCTS, cli={"demo_secret": "hunter2", "api_key": "sk-123"}, env={})
    summary = s.summary()
    assert summary["demo_secret"] == "***" and summary["api_key"] == "***"
    assert "hunter2" not in str(summary) and "sk-123" not in str(summary)


def test_a_misspelt_environment_variable_is_named_with_the_one_meant(caplog: pytest.LogCaptureFixture) -> None:
    env = {"FLEXSERV_MODLE_TIMEOUT": "600", "FLEXSERV_PLUGINS": "a,b", "FLEXSERV_TEST_CHROMIUM": "1", "HOME": "/"}
    with caplog.at_level("WARNING", logger="flexserv_core.settings"):
        settings = resolve_settings([CoreSettings], cli={}, env=env)
    assert settings.core.model_timeout == CoreSettings().model_timeout  # ignored, as before
    warned = [r.getMessage() for r in caplog.records]
    # near misses only: variables that are not settings (the plugin list, a test's switch) say nothing
    assert warned == [
        "ignoring environment variable FLEXSERV_MODLE_TIMEOUT: no setting has that name"
        " (did you mean FLEXSERV_MODEL_TIMEOUT?)"
    ]
