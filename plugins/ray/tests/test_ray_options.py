"""The command's pure parts: flags -> deployment options, the config file, settings transport."""

from __future__ import annotations

import argparse

import pytest
import yaml
from flexserv_ray import plugin as ray_plugin
from flexserv_ray.app_args import app_args_from, rebuild, setting_value
from flexserv_ray.cli import ray_serve_main
from flexserv_ray.options import RayOptions, add_ray_arguments, deployment_options, parse_size, ray_options_from
from flexserv_ray.serve_config import render, serve_config

from flexserv_core.testing.app import make_plugin_manager, make_settings


def _options(*argv: str) -> RayOptions:
    parser = argparse.ArgumentParser()
    add_ray_arguments(parser)
    return ray_options_from(parser.parse_args(list(argv)))


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
    assert with_secret.settings["api_key"] == "s3cret"
    # A replica rebuilds the same values; the secret comes from its own environment.
    _, rebuilt = rebuild(args, env={"FLEXSERV_DISABLE_PLUGIN_AUTOLOAD": "1", "FLEXSERV_API_KEY": "from-env"})
    assert rebuilt.core.model_timeout == 5.0 and rebuilt.core.model == ["a=fake://a"]
    assert rebuilt.core.api_key == "from-env"
    assert setting_value(rebuilt, "model_timeout") == 5.0 and setting_value(rebuilt, "nope", 1) == 1


def test_emitted_config_is_a_valid_ray_serve_config(tmp_path, capsys, monkeypatch) -> None:
    from ray.serve.schema import ServeDeploySchema

    monkeypatch.setenv("FLEXSERV_DISABLE_PLUGIN_AUTOLOAD", "1")
    out = tmp_path / "serve.yaml"
    status = ray_serve_main(
        [
            "--emit-config",
            str(out),
            "--api-key",
            "k",
            "--model",
            "m=fake://m",
            "--ray-min-replicas",
            "1",
            "--ray-max-replicas",
            "2",
            "--port",
            "9000",
        ]
    )
    assert status == 0
    text = out.read_text()
    assert "serve deploy" in text and "api_key" not in yaml.safe_load(text)["applications"][0]["args"]["settings"]
    config = ServeDeploySchema.model_validate(yaml.safe_load(text))
    app = config.applications[0]
    assert app.import_path == "flexserv_ray.app:build_app"
    assert app.args["settings"] == {"model": ["m=fake://m"]}
    assert config.http_options.port == 9000
    deployment = app.deployments[0]
    assert deployment.autoscaling_config["max_replicas"] == 2
    assert deployment.max_ongoing_requests == 32


def test_render_round_trips() -> None:
    pm = make_plugin_manager()
    args = app_args_from([], make_settings(pm), models_per_replica=1, include_secrets=False, env={})
    config = serve_config(args, {"name": "FlexServ", "num_replicas": 1}, app_name="x", host="0.0.0.0", port=1)
    assert yaml.safe_load(render(config)) == config


def test_bad_settings_exit_2_before_anything_is_deployed(capsys, monkeypatch) -> None:
    monkeypatch.setenv("FLEXSERV_DISABLE_PLUGIN_AUTOLOAD", "1")
    assert ray_serve_main(["--model-timeout", "-3", "--emit-config", "-"]) == 2
    assert "model_timeout" in capsys.readouterr().err
    assert ray_serve_main(["--ray-min-replicas", "3", "--ray-max-replicas", "1", "--emit-config", "-"]) == 2


def test_the_plugin_registers_the_command_without_breaking_flexserv() -> None:
    pm = make_plugin_manager(["flexserv_ray.plugin"])
    assert "flexserv_ray.plugin" in list(pm.loaded_names())
    commands = ray_plugin.register_commands()
    assert commands["ray-serve"](["--emit-config", "-", "-p", "no:resources"]) == 0
