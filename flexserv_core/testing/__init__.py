"""Testing kit for FlexServ and its plugins (also a pytest plugin, see ``pytest_plugin``).

Plugin tests import what they need from here: app builders and clients, test
doubles that are real plugins, helpers to run ``flexserv`` as a process, and
:func:`wait_until` / :func:`wait_until_async` to wait for a condition instead of
sleeping.
"""

from flexserv_core.testing.app import (
    BASE_URL,
    app_client,
    make_app,
    make_plugin_manager,
    make_settings,
    openai_client,
    running_app_client,
)
from flexserv_core.testing.blocking import post_read, served_with_and_without
from flexserv_core.testing.fakes import (
    FAKE_ALTERNATIVES,
    FAKE_SCRIPT,
    FakeBackendPlugin,
    FakeRequest,
    FakeTextBackend,
    FakeTextModel,
)
from flexserv_core.testing.faults import file_size_limit
from flexserv_core.testing.process import (
    ServedApp,
    flexserv_cmd,
    free_port,
    run_flexserv,
    stop_process,
    wait_healthy,
    write_distribution,
)
from flexserv_core.testing.waiting import wait_until, wait_until_async

__all__ = [
    "BASE_URL",
    "FAKE_ALTERNATIVES",
    "FAKE_SCRIPT",
    "FakeBackendPlugin",
    "FakeRequest",
    "FakeTextBackend",
    "FakeTextModel",
    "ServedApp",
    "app_client",
    "file_size_limit",
    "flexserv_cmd",
    "free_port",
    "make_app",
    "make_plugin_manager",
    "make_settings",
    "openai_client",
    "post_read",
    "run_flexserv",
    "running_app_client",
    "served_with_and_without",
    "stop_process",
    "wait_healthy",
    "wait_until",
    "wait_until_async",
    "write_distribution",
]
