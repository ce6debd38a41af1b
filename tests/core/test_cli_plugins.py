"""Plugin selection through the real CLI: -p, no:, FLEXSERV_PLUGINS, broken plugins."""

from __future__ import annotations

import json
import re

import pytest

from flexserv_core.testing.process import free_port, run_flexserv

pytestmark = pytest.mark.slow  # runs the flexserv CLI as processes


def plugins_json(*args: str, env: dict[str, str] | None = None, returncode: int = 0) -> dict[str, dict]:
    result = run_flexserv("plugins", "--json", *args, env=env)
    assert result.returncode == returncode, result.stderr
    return {p["name"]: p for p in json.loads(result.stdout)}


def test_lists_builtins_and_installed_contrib_plugin() -> None:
    plugins = plugins_json()
    for name in ("core", "openai"):
        assert plugins[name]["status"] == "loaded" and plugins[name]["distribution"] == "flexserv-core"
    assert plugins["transformers"]["status"] == "loaded"
    assert plugins["transformers"]["distribution"] == "flexserv-transformers"
    contrib = plugins["request-policy"]
    assert contrib["distribution"] == "flexserv-request-policy" and contrib["version"] == "0.1.0"
    assert "flexserv_preprocess_request" in contrib["hooks"]
    assert contrib["routes"] == ["GET /v1/contrib/request-policy"]
    assert "GET /v1/flexserv/health" in plugins["core"]["routes"]
    # each backend under the plugin that registers it, as docs/configuration.md says
    assert "transformers (text)" in plugins["transformers"]["backends"]
    assert plugins["whisper"]["backends"] and all("(transcription)" in b for b in plugins["whisper"]["backends"])
    assert plugins["request-policy"]["backends"] == []


def test_block_removes_plugin_and_its_route() -> None:
    plugins = plugins_json("-p", "no:request-policy")
    assert plugins["request-policy"]["status"] == "blocked"
    assert plugins["request-policy"]["routes"] == [] and plugins["request-policy"]["hooks"] == []


def test_explicit_empty_list_loads_no_installed_plugin() -> None:
    plugins = plugins_json(env={"FLEXSERV_PLUGINS": ""})
    assert "request-policy" not in plugins
    assert plugins["core"]["status"] == "loaded"  # built-ins stay


def test_explicit_list_and_autoload_off() -> None:
    assert "request-policy" in plugins_json(env={"FLEXSERV_PLUGINS": "request-policy"})
    assert "request-policy" not in plugins_json(env={"FLEXSERV_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert "request-policy" in plugins_json("-p", "request-policy", env={"FLEXSERV_DISABLE_PLUGIN_AUTOLOAD": "1"})


def test_dotted_module_path_plugin(make_distribution) -> None:
    env = make_distribution(
        "local-thing",
        "unused",
        "my_local_plugin",
        "from flexserv_core.hookspecs import hookimpl\n\n@hookimpl\ndef flexserv_health(server):\n    return {'local': True}\n",
    )
    env["FLEXSERV_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    plugins = plugins_json("-p", "my_local_plugin", env=env)
    # the module of an installed entry point is that plugin, under its entry-point name
    assert plugins["unused"]["hooks"] == ["flexserv_health"]
    assert plugins["unused"]["distribution"] == "local-thing"
    assert "my_local_plugin" not in plugins


BROKEN = {
    "import error": "raise ImportError('needs libfoo, which is not installed')\n",
    "unknown hook": "from flexserv_core.hookspecs import hookimpl\n\n@hookimpl\ndef flexserv_not_a_hook():\n    pass\n",
    "wrong arguments": "from flexserv_core.hookspecs import hookimpl\n\n@hookimpl\ndef flexserv_health(server, bogus):\n    return {}\n",
}


@pytest.mark.parametrize("kind", BROKEN)
def test_broken_plugin_stops_run_naming_plugin_and_distribution(make_distribution, kind: str) -> None:
    env = make_distribution("flexserv-broken-example", "broken-example", "flexserv_broken_example", BROKEN[kind])
    result = run_flexserv("run", "--port", str(free_port()), env=env, timeout=60)
    assert result.returncode != 0
    assert 'Error loading plugin "broken-example" (distribution flexserv-broken-example)' in result.stderr
    assert "-p no:broken-example" in result.stderr
    listed = plugins_json(env=env, returncode=3)["broken-example"]
    assert listed["status"] == "failed" and listed["error"]
    if kind == "import error":  # the plugin's own line, and the traceback on request
        assert re.search(r"raised at \S*flexserv_broken_example\.py:1 in <module>", result.stderr), result.stderr
        debug = run_flexserv("run", "--log-level", "debug", "--port", str(free_port()), env=env, timeout=60)
        assert "Traceback (most recent call last)" in debug.stderr and "needs libfoo" in debug.stderr


def test_plugins_exits_non_zero_when_a_plugin_failed_and_still_prints_the_table(make_distribution) -> None:
    env = make_distribution(
        "flexserv-broken-example", "broken-example", "flexserv_broken_example", BROKEN["import error"]
    )
    result = run_flexserv("plugins", env=env)
    assert result.returncode == 3
    assert "broken-example" in result.stdout and "failed" in result.stdout
    assert "core" in result.stdout and "transformers" in result.stdout  # the others are still listed
    assert "1 plugin(s) failed: broken-example" in result.stderr
    assert run_flexserv("plugins", "-p", "no:broken-example", env=env).returncode == 0


def test_unknown_plugin_is_a_usage_error_listing_the_installed_ones() -> None:
    result = run_flexserv("run", "-p", "nosuchplugin", "--port", str(free_port()))
    assert result.returncode == 2
    assert "plugin 'nosuchplugin' is not installed" in result.stderr
    assert "request-policy" in result.stderr and "transformers" in result.stderr
    assert "no:nosuchplugin" not in result.stderr and "Traceback" not in result.stderr


def test_dotted_module_of_an_installed_plugin_is_registered_once() -> None:
    plugins = plugins_json("-p", "flexserv_request_policy.plugin")
    assert "flexserv_request_policy.plugin" not in plugins
    assert plugins["request-policy"]["status"] == "loaded"


def test_blocked_plugins_config_setting_is_ignored_with_one_warning(tmp_path) -> None:
    config = tmp_path / "flexserv.toml"
    config.write_text("request_policy_max_tokens_cap = 5\n")
    env = {"FLEXSERV_REQUEST_POLICY_DEFAULT_TEMPERATURE": "0.5"}
    result = run_flexserv("plugins", "--config", str(config), "-p", "no:request-policy", env=env)
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "ignoring settings of blocked plugin" in line]
    assert len(warnings) == 1
    assert "request_policy_max_tokens_cap (config file)" in warnings[0]
    assert "FLEXSERV_REQUEST_POLICY_DEFAULT_TEMPERATURE (environment)" in warnings[0]


def test_blocking_the_broken_plugin_lets_settings_validation_run(make_distribution) -> None:
    env = make_distribution(
        "flexserv-broken-example", "broken-example", "flexserv_broken_example", BROKEN["import error"]
    )
    result = run_flexserv("run", "-p", "no:broken-example", "--port", "not-a-port", env=env)
    assert result.returncode == 2
    assert "invalid value for setting 'port' (--port)" in result.stderr


def test_plugin_settings_appear_in_help() -> None:
    result = run_flexserv("run", "--help")
    assert result.returncode == 0
    assert "--request-policy-max-tokens-cap" in result.stdout
    assert "--model-timeout" in result.stdout
    blocked = run_flexserv("run", "-p", "no:request-policy", "--help")
    assert "--request-policy-max-tokens-cap" not in blocked.stdout


BUILD_TIME_FAILURES = {
    "flexserv_add_settings": "def flexserv_add_settings():\n    raise RuntimeError('kaboom')\n",
    "flexserv_configure": "def flexserv_configure(settings):\n    raise RuntimeError('kaboom')\n",
    "flexserv_register_backends": "def flexserv_register_backends(settings):\n    raise RuntimeError('kaboom')\n",
    "flexserv_default_models": "def flexserv_default_models(settings):\n    raise RuntimeError('kaboom')\n",
    "flexserv_register_routes": "def flexserv_register_routes(settings):\n    raise RuntimeError('kaboom')\n",
    "flexserv_startup": "async def flexserv_startup(server):\n    raise RuntimeError('kaboom')\n",
}


@pytest.mark.slow
@pytest.mark.parametrize("hook", BUILD_TIME_FAILURES)
def test_start_up_hook_failure_stops_run_naming_plugin_and_distribution(make_distribution, hook: str) -> None:
    source = "from flexserv_core.hookspecs import hookimpl\n\n@hookimpl\n" + BUILD_TIME_FAILURES[hook]
    env = make_distribution("flexserv-raising-example", "raising-example", "flexserv_raising_example", source)
    env["FLEXSERV_PLUGINS"] = "raising-example"
    result = run_flexserv("run", "--port", str(free_port()), env=env, timeout=60)
    assert result.returncode == 3, result.stderr  # docs/hooks.md: 3, before serving as in the startup hook
    expected = (
        f'Plugin "raising-example" (distribution flexserv-raising-example) failed in {hook}: RuntimeError: kaboom'
    )
    assert expected in result.stderr
    assert "-p no:raising-example" in result.stderr
    assert "Traceback" not in result.stderr or hook == "flexserv_startup"
