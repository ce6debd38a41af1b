"""The command's pure parts: flags -> deployment options, the config file, settings transport."""

from __future__ import annotations

import argparse
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from flexserv_ray import plugin as ray_plugin
from flexserv_ray.app_args import app_args_from, rebuild, setting_value
from flexserv_ray.cli import run
from flexserv_ray.cluster import LOCAL_CLUSTER_ENV, RAY_AUTH_ENV, RayCluster
from flexserv_ray.options import RayOptions, add_ray_arguments, deployment_options, parse_size, ray_options_from
from flexserv_ray.serve_config import render, serve_config

from flexserv_core import CommandContext, UsageError
from flexserv_core.testing import flexserv_cmd, make_plugin_manager, make_settings

NO_AUTOLOAD = {"FLEXSERV_DISABLE_PLUGIN_AUTOLOAD": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def _options(*argv: str) -> RayOptions:
    parser = argparse.ArgumentParser()
    add_ray_arguments(parser)
    return ray_options_from(parser.parse_args(list(argv)))


def test_a_local_cluster_tolerates_a_slow_proxy_start_unless_told_otherwise() -> None:
    cluster = RayCluster(None, local_cpus=1, local_env={"FLEXSERV_RAY_RETRY_AFTER": "2"})
    assert cluster.local_env == {**LOCAL_CLUSTER_ENV, "FLEXSERV_RAY_RETRY_AFTER": "2"}
    assert float(LOCAL_CLUSTER_ENV["RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S"]) > 5  # Ray's own default
    told = RayCluster(None, local_cpus=1, local_env={"RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "7"})
    assert told.local_env["RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S"] == "7"


@pytest.mark.parametrize("given", [{}, {"RAY_AUTH_MODE": "disabled"}, {"RAY_AUTH_TOKEN_PATH": "token"}])
def test_a_local_cluster_gets_a_fresh_token_unless_the_environment_sets_ray_auth(
    given: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in RAY_AUTH_ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in given.items():
        monkeypatch.setenv(name, value)
    RayCluster("127.0.0.1:6379", local_cpus=1).prepare()  # a joined cluster: Ray's own rules
    assert {n: os.environ[n] for n in RAY_AUTH_ENV if n in os.environ} == given
    RayCluster(None, local_cpus=1).prepare()
    found = {n: os.environ[n] for n in RAY_AUTH_ENV if n in os.environ}
    if given:
        assert found == given
    else:
        assert found["RAY_AUTH_MODE"] == "token" and len(found["RAY_AUTH_TOKEN"]) == 64, found
        token = found["RAY_AUTH_TOKEN"]
        monkeypatch.delenv("RAY_AUTH_MODE")
        monkeypatch.delenv("RAY_AUTH_TOKEN")
        RayCluster(None, local_cpus=1).prepare()
        assert os.environ["RAY_AUTH_TOKEN"] != token  # fresh each time


def test_back_pressure_follows_the_engine_limits() -> None:
    opts = deployment_options(_options(), {"max_batch_size": 8, "max_queued_requests": 20}, shutdown_timeout=7)
    assert opts["max_ongoing_requests"] == 8
    assert opts["max_queued_requests"] == 20
    assert opts["backpressure_config"] == {"status_code": 429, "retry_after_s": 1.0}
    assert opts["graceful_shutdown_timeout_s"] == 7
    assert opts["num_replicas"] == 1 and "autoscaling_config" not in opts


def test_flags_override_the_engine_limits_and_set_resources() -> None:
    opts = deployment_options(
        _options(
            "--ray-max-ongoing-requests",
            "3",
            "--ray-max-queued-requests",
            "-1",
            "--ray-overload-status",
            "503",
            "--ray-num-gpus",
            "0.5",
            "--ray-memory",
            "2GiB",
            "--ray-replicas",
            "4",
        ),
        {"max_batch_size": 8, "max_queued_requests": 20},
        shutdown_timeout=10,
    )
    assert (opts["max_ongoing_requests"], opts["max_queued_requests"]) == (3, -1)
    assert opts["backpressure_config"]["status_code"] == 503
    assert opts["ray_actor_options"] == {"num_cpus": 1.0, "num_gpus": 0.5, "memory": 2 * 2**30}
    assert opts["num_replicas"] == 4


def test_autoscaling_replaces_a_fixed_count() -> None:
    opts = deployment_options(
        _options("--ray-min-replicas", "0", "--ray-max-replicas", "3"), {"max_batch_size": 10}, shutdown_timeout=10
    )
    auto = opts["autoscaling_config"]
    assert "num_replicas" not in opts
    assert (auto["min_replicas"], auto["max_replicas"], auto["initial_replicas"]) == (0, 3, 1)
    assert auto["target_ongoing_requests"] == 5  # half a batch by default
    with pytest.raises(ValueError, match="below"):
        deployment_options(_options("--ray-min-replicas", "4", "--ray-max-replicas", "2"), {}, shutdown_timeout=1)


def test_parse_size() -> None:
    assert parse_size("512MiB") == 512 * 2**20
    assert parse_size("2G") == 2_000_000_000
    assert parse_size("1000") == 1000
    with pytest.raises(argparse.ArgumentTypeError):
        parse_size("lots")


def test_settings_travel_by_name_and_secrets_stay_out_of_files() -> None:
    pm = make_plugin_manager()
    settings = make_settings(pm, {"api_key": "s3cret", "model_timeout": 5, "model": ["a=fake://a"]})
    args = app_args_from(["no:resources"], settings, models_per_replica=2, include_secrets=False, env={})
    assert args.settings == {"model_timeout": 5.0, "model": ["a=fake://a"]}
    assert args.plugins == ["no:resources"]
    with_secret = app_args_from([], settings, models_per_replica=2, include_secrets=True, env={})
    assert with_secret.settings["api_key"] == ["s3cret"]
    # A replica rebuilds the same values; the secret comes from its own environment.
    _, rebuilt = rebuild(args, env={"FLEXSERV_DISABLE_PLUGIN_AUTOLOAD": "1", "FLEXSERV_API_KEY": "from-env"})
    assert rebuilt.core.model_timeout == 5.0 and rebuilt.core.model == ["a=fake://a"]
    assert rebuilt.core.api_key == ["from-env"]
    assert setting_value(rebuilt, "model_timeout") == 5.0 and setting_value(rebuilt, "nope", 1) == 1


def test_every_replica_gets_the_command_s_state_url(tmp_path: Path) -> None:
    stateless = make_settings(make_plugin_manager(), {"cache_dir": str(tmp_path)})  # as under -p no:state
    assert "state_url" not in app_args_from([], stateless, models_per_replica=1, include_secrets=True, env={}).settings
    pm = make_plugin_manager(["state"])
    default = make_settings(pm, {"cache_dir": str(tmp_path)})
    args = app_args_from([], default, models_per_replica=1, include_secrets=True, env={})
    assert args.settings["state_url"] == f"sqlite://{tmp_path}/state.db"  # one file for the replicas of a node
    explicit = make_settings(pm, {"state_url": "postgresql://app:pw@db/flexserv"})
    args = app_args_from([], explicit, models_per_replica=1, include_secrets=True, env={})
    assert args.settings["state_url"] == "postgresql://app:pw@db/flexserv"
    # a config file leaves the URL (a secret) to each replica's environment
    assert "state_url" not in app_args_from([], explicit, models_per_replica=1, include_secrets=False, env={}).settings


def _context(argv: list[str], settings: dict[str, Any], plugin_args: tuple[str, ...] = ()) -> CommandContext:
    parser = argparse.ArgumentParser()
    add_ray_arguments(parser)
    return CommandContext(
        args=parser.parse_args(argv), settings=make_settings(make_plugin_manager(), settings), plugin_args=plugin_args
    )


def test_ray_flags_never_shadow_a_setting_of_the_same_name() -> None:
    # The command's parser also holds every setting; `--ray-max-queued-requests`
    # must not land where the engine's `max_queued_requests` setting is read.
    parser = argparse.ArgumentParser()
    add_ray_arguments(parser)
    parser.add_argument("--max-queued-requests", dest="max_queued_requests", default=argparse.SUPPRESS)
    args = parser.parse_args(["--ray-max-queued-requests", "3"])
    assert "max_queued_requests" not in vars(args)
    assert ray_options_from(args).max_queued_requests == 3
    args = parser.parse_args(["--max-queued-requests", "9"])
    assert vars(args)["max_queued_requests"] == "9" and ray_options_from(args).max_queued_requests is None


def test_run_emits_a_valid_ray_serve_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ray.serve.schema import ServeDeploySchema

    out = tmp_path / "serve.yaml"
    context = _context(
        ["--emit-config", str(out), "--ray-min-replicas", "1", "--ray-max-replicas", "2"],
        {"api_key": "k", "model": ["m=fake://m"], "port": 9000},
        plugin_args=("no:resources",),
    )
    assert run(context) == 0
    assert "serve deploy" in capsys.readouterr().out
    text = out.read_text()
    assert "serve deploy" in text
    config = ServeDeploySchema.model_validate(yaml.safe_load(text))
    app = config.applications[0]
    assert app.import_path == "flexserv_ray.app:build_app"
    # host/port are the proxy's; the secret stays out of the file.
    assert app.args["settings"] == {"model": ["m=fake://m"]}
    assert app.args["plugins"] == ["no:resources"]
    assert config.http_options.port == 9000
    deployment = app.deployments[0]
    assert deployment.autoscaling_config["max_replicas"] == 2
    assert deployment.max_ongoing_requests == 32


def test_run_rejects_inconsistent_replica_bounds() -> None:
    context = _context(["--ray-min-replicas", "3", "--ray-max-replicas", "1", "--emit-config", "-"], {})
    with pytest.raises(UsageError, match="below"):
        run(context)


def test_tls_settings_are_refused_ray_s_proxy_serves_plain_http(tmp_path: Path) -> None:
    context = _context(["--emit-config", "-"], {"ssl_keyfile": "k.pem", "ssl_certfile": "c.pem"})
    with pytest.raises(UsageError, match="plain HTTP"):
        run(context)


def test_render_round_trips() -> None:
    pm = make_plugin_manager()
    args = app_args_from([], make_settings(pm), models_per_replica=1, include_secrets=False, env={})
    config = serve_config(args, {"name": "FlexServ", "num_replicas": 1}, app_name="x", host="0.0.0.0", port=1)
    assert yaml.safe_load(render(config)) == config


def test_the_plugin_registers_one_command_with_settings() -> None:
    pm = make_plugin_manager(["flexserv_ray.plugin"])
    # the module of the installed entry point is that plugin, registered once under its name
    assert "ray" in list(pm.loaded_names()) and "flexserv_ray.plugin" not in list(pm.loaded_names())
    [command] = ray_plugin.flexserv_register_commands()
    assert command.name == "ray-serve" and command.settings
    parser = argparse.ArgumentParser()
    assert command.add_arguments is not None
    command.add_arguments(parser)
    assert "--ray-replicas" in parser.format_help()


def _flexserv(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **NO_AUTOLOAD}
    return subprocess.run(flexserv_cmd(*args), capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.slow
def test_flexserv_lists_and_runs_the_command() -> None:
    listing = _flexserv("--help", "-p", "ray")
    assert listing.returncode == 0 and "ray-serve" in listing.stdout, listing.stdout + listing.stderr
    help_text = _flexserv("ray-serve", "-p", "ray", "--help")
    assert help_text.returncode == 0, help_text.stderr
    # its own flags and every setting's, as for `flexserv run`
    assert "--ray-replicas" in help_text.stdout and "--model-timeout" in help_text.stdout
    assert "--config" in help_text.stdout
    emitted = _flexserv("ray-serve", "-p", "ray", "--model", "m=fake://m", "--emit-config", "-")
    assert emitted.returncode == 0, emitted.stderr
    assert yaml.safe_load(emitted.stdout)["applications"][0]["args"]["settings"] == {"model": ["m=fake://m"]}


@pytest.mark.slow
def test_bad_settings_and_flags_exit_2_before_anything_is_deployed() -> None:
    bad_setting = _flexserv("ray-serve", "-p", "ray", "--model-timeout", "-3", "--emit-config", "-")
    assert bad_setting.returncode == 2 and "model_timeout" in bad_setting.stderr
    bad_bounds = _flexserv("ray-serve", "-p", "ray", "--ray-min-replicas", "3", "--ray-max-replicas", "1")
    assert bad_bounds.returncode == 2 and "below" in bad_bounds.stderr


@pytest.mark.slow
def test_engine_limits_reach_the_deployment_and_ray_flags_override_them() -> None:
    common = [
        "ray-serve",
        "-p",
        "ray",
        "-p",
        "transformers",
        "--transformers-max-batch-size",
        "6",
        "--transformers-max-queued-requests",
        "7",
    ]
    derived = _flexserv(*common, "--emit-config", "-")
    assert derived.returncode == 0, derived.stderr
    app = yaml.safe_load(derived.stdout)["applications"][0]
    assert app["args"]["settings"]["transformers_max_queued_requests"] == 7
    assert (app["deployments"][0]["max_ongoing_requests"], app["deployments"][0]["max_queued_requests"]) == (6, 7)
    overridden = _flexserv(*common, "--ray-max-queued-requests", "3", "--emit-config", "-")
    assert overridden.returncode == 0, overridden.stderr
    app = yaml.safe_load(overridden.stdout)["applications"][0]
    assert app["args"]["settings"]["transformers_max_queued_requests"] == 7  # the engine's setting is untouched
    assert app["deployments"][0]["max_queued_requests"] == 3


def test_stop_signals_record_then_interrupt_only_while_deploying() -> None:
    import signal

    from flexserv_ray.cli import StopSignals, _Interrupted

    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    signals = StopSignals()
    try:
        signals.install()
        os.kill(os.getpid(), signal.SIGTERM)  # while Ray starts: recorded, nothing raised
        assert signals.stop.is_set()
        signals.stop.clear()
        signals.interruptible = True
        with pytest.raises(_Interrupted):
            os.kill(os.getpid(), signal.SIGINT)  # while deploying: interrupts, once
        assert signals.stop.is_set() and not signals.interruptible
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
