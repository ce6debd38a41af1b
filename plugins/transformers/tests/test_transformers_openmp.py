"""OpenMP's passive wait policy is set when the plugin loads, before torch."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# Each test starts a Python process that imports torch.
pytestmark = pytest.mark.slow

PROBE = "import os, flexserv_transformers; print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('KMP_BLOCKTIME'))"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "KMP_BLOCKTIME")}
    return {**env, **extra}


def _run(code: str, env: dict[str, str]) -> str:
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout


def test_importing_the_plugin_defaults_openmp_to_passive_waiting():
    assert _run(PROBE, _env()).split() == ["PASSIVE", "0"]


def test_an_explicit_wait_policy_wins():
    assert _run(PROBE, _env(OMP_WAIT_POLICY="ACTIVE")).split() == ["ACTIVE", "0"]


def test_too_late_once_torch_is_loaded():
    code = "import torch, os\nfrom flexserv_torch import prefer_passive_openmp\nprint(prefer_passive_openmp(), os.environ.get('OMP_WAIT_POLICY'))"
    assert _run(code, _env()).split() == ["False", "None"]


@pytest.mark.parametrize("variable", ["ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY"])
def test_importing_the_plugin_bounds_onednn_kernel_caches(variable: str) -> None:
    """oneDNN's primitive cache and ideep's (torch's wrapper) each keep 16 kernels, unless set."""
    code = f"import os, flexserv_transformers; print(os.environ.get({variable!r}))"
    env = {k: v for k, v in os.environ.items() if k != variable}
    assert _run(code, env).split() == ["16"]
    assert _run(code, {**env, variable: "1024"}).split() == ["1024"]
