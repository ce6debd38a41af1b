"""Testing kit for FlexServ and its plugins (also a pytest plugin, see ``pytest_plugin``).

Plugin tests import what they need from here: app builders and clients, test
doubles that are real plugins, helpers to run ``flexserv`` as a process, and
:func:`wait_until` / :func:`wait_until_async` to wait for a condition instead of
sleeping.
"""

from flexserv_core.state.memory import MemoryBackend
from flexserv_core.testing.app import (
    BASE_URL,
    app_client,
    make_app,
    make_plugin_manager,
    make_settings,
    openai_client,
    running_app_client,
)
from flexserv_core.testing.fakes import (
    FAKE_ALTERNATIVES,
    FAKE_SCRIPT,
    FakeBackendPlugin,
    FakeRequest,
    FakeTextBackend,
    FakeTextModel,
)
from flexserv_core.testing.process import (
    ServedApp,
    flexserv_cmd,
    free_port,
    run_flexserv,
    stop_process,
    wait_healthy,
    write_distribution,
)
from flexserv_core.testing.state_contract import ManualClock, StateBackendContract, blob_chunks, read_blob_bytes
from flexserv_core.testing.state_writer import start_state_writer, stored_writes
from flexserv_core.testing.waiting import wait_until, wait_until_async

__all__ = [
    "BASE_URL",
    "FAKE_ALTERNATIVES",
    "FAKE_SCRIPT",
    "FakeBackendPlugin",
    "FakeRequest",
    "FakeTextBackend",
    "FakeTextModel",
    "ManualClock",
    "MemoryBackend",
    "ServedApp",
    "StateBackendContract",
    "app_client",
    "blob_chunks",
    "flexserv_cmd",
    "free_port",
    "make_app",
    "make_plugin_manager",
    "make_settings",
    "openai_client",
    "read_blob_bytes",
    "run_flexserv",
    "running_app_client",
    "start_state_writer",
    "stop_process",
    "stored_writes",
    "wait_healthy",
    "wait_until",
    "wait_until_async",
    "write_distribution",
]
