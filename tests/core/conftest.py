"""Fixtures for tests that run ``flexserv`` as a real process."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from flexserv_core.testing.process import write_distribution


@pytest.fixture
def make_distribution(tmp_path: Path) -> Callable[..., dict[str, str]]:
    """Create a distribution and return the env (PYTHONPATH) that makes it visible."""

    def make(dist: str, ep_name: str, module: str, source: str) -> dict[str, str]:
        root = write_distribution(tmp_path / dist, dist, ep_name, module, source)
        return {"PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}

    return make
