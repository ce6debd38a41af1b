"""The FlexServ spec's --continuous-batching flag selects the engine."""

from __future__ import annotations

import pytest
from flexserv_transformers.plugin import flexserv_configure
from flexserv_transformers.settings import TransformersSettings

from flexserv_core import UsageError
from flexserv_core.testing import make_plugin_manager, make_settings


def _engine(**overrides: object) -> str:
    pm = make_plugin_manager(["transformers"])
    settings = make_settings(pm, {"device": "cpu", **overrides})
    flexserv_configure(settings)
    return settings.get(TransformersSettings).transformers_engine


def test_continuous_batching_flag_selects_the_engine() -> None:
    assert _engine(transformers_engine="simple", continuous_batching=None) == "simple"
    assert _engine(continuous_batching=True) == "paged"
    assert _engine(continuous_batching=False) == "simple"
    assert _engine(continuous_batching=True, transformers_engine="paged") == "paged"


def test_continuous_batching_contradicting_engine_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="--continuous-batching means --transformers-engine paged"):
        _engine(continuous_batching=True, transformers_engine="simple")
