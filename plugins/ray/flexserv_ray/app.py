"""Ray Serve applications of the FlexServ deployment.

``build_app`` is the ``import_path`` target of a generated config file
(``serve deploy flexserv.yaml``); ``application`` is what ``flexserv ray-serve``
runs, with the deployment options given in code instead of YAML.
"""

from __future__ import annotations

from typing import Any, cast

import msgspec
from ray.serve import Application, Deployment

from flexserv_ray.app_args import AppArgs
from flexserv_ray.replica import FlexServDeployment


def build_app(args: dict[str, Any]) -> Application:
    """Application builder for Ray's config files: ``args`` is an :class:`AppArgs` as a mapping."""
    app_args = msgspec.convert(dict(args), AppArgs)  # rejects unknown keys with a clear message
    return _deployment().bind(msgspec.to_builtins(app_args))


def application(app_args: AppArgs, deployment: dict[str, Any]) -> Application:
    return _deployment().options(**deployment).bind(msgspec.to_builtins(app_args))


def _deployment() -> Deployment:
    # @serve.deployment made the class a Deployment; type checkers still see the class.
    return cast(Deployment, FlexServDeployment)
