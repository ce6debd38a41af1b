"""Default models with real installed distributions: discovery order changes nothing."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from flexserv_core.testing.process import flexserv_cmd, free_port, stop_process, wait_healthy, write_distribution

pytestmark = pytest.mark.slow  # runs flexserv as a process

PLUGIN = """
from flexserv_core import Backend, ModelSpec, hookimpl


class Vectors(Backend):
    name = "{name}-embed"
    kind = "embedding"

    def load(self, spec, progress):
        raise RuntimeError("never loaded here")


@hookimpl
def flexserv_register_backends(settings):
    return [Vectors()]


@hookimpl
def flexserv_default_models(settings):
    return [ModelSpec(name="{name}-vec", kind="embedding", source="{name}://", backend="{name}-embed")]
"""


@pytest.fixture
def two_distributions(tmp_path: Path) -> Callable[[list[str], str], tuple[dict[str, str], str]]:
    """Install ``alpha`` and ``zeta`` (each offering an embedding model) as real
    distributions; ``serve(order, plugins)`` serves with them on ``sys.path`` in
    ``order`` and returns the server's defaults and its log."""
    roots = {
        name: write_distribution(
            tmp_path / name, f"flexserv-{name}", name, f"flexserv_{name}", PLUGIN.format(name=name)
        )
        for name in ("alpha", "zeta")
    }

    def serve(order: list[str], plugins: str) -> tuple[dict[str, str], str]:
        port = free_port()
        path = os.pathsep.join([*(str(roots[n]) for n in order), os.environ.get("PYTHONPATH", "")])
        env = {**os.environ, "PYTHONPATH": path, "FLEXSERV_PLUGINS": plugins, "FLEXSERV_CACHE_DIR": str(tmp_path)}
        proc = subprocess.Popen(
            flexserv_cmd("run", "--port", str(port)),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            wait_healthy(base, proc)
            info = httpx.get(f"{base}/v1/flexserv/info").json()
        finally:
            stop_process(proc)
        output = proc.stdout.read() if proc.stdout else ""
        return info["defaults"], output

    return serve


def test_third_party_defaults_do_not_depend_on_install_order(two_distributions) -> None:
    for order in (["alpha", "zeta"], ["zeta", "alpha"]):
        defaults, log = two_distributions(order, "zeta,alpha")
        assert defaults["embedding"] == "alpha-vec", log
        assert "several plugins offer a default embedding model: using 'alpha-vec' (plugin alpha" in log


def test_a_first_party_embedded_model_stays_the_default(two_distributions) -> None:
    defaults, log = two_distributions(["zeta", "alpha"], "zeta,alpha,sentence-transformers")
    assert defaults["embedding"] == "all-MiniLM-L6-v2", log
    assert "several plugins offer" not in log
