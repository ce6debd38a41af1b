"""Start-up keeps torch off its path; the background imports leave it ready for the first load."""

from __future__ import annotations

import subprocess
import sys

import pytest

# Each test starts a Python process that imports torch.
pytestmark = pytest.mark.slow

CHECK_DEFAULTS = """
import sys
from flexserv_transformers.settings import TransformersSettings, check_settings
check_settings(TransformersSettings())
print("torch" in sys.modules)
check_settings(TransformersSettings(transformers_device="cpu"))
print("torch" in sys.modules)
"""

PREWARM = """
import sys, types
from flexserv_transformers.plugin import flexserv_add_settings, flexserv_startup
from flexserv_transformers import prewarm
from flexserv_transformers.settings import TransformersSettings
from flexserv_core import CoreSettings, resolve_settings
settings = resolve_settings([CoreSettings, *flexserv_add_settings()], cli=CLI, env={})
flexserv_startup(types.SimpleNamespace(settings=settings, catalog=types.SimpleNamespace(specs=list)))  # no models
prewarm.wait()
print(all(name in sys.modules for name in prewarm.modules_for(settings.get(TransformersSettings))))
print("transformers.models.llama.modeling_llama" in sys.modules)
"""


def _run(code: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    return done.stdout.split()


def test_checking_default_settings_does_not_import_torch():
    # An explicit device is validated, which needs torch.
    assert _run(CHECK_DEFAULTS) == ["False", "True"]


def test_warm_imports_import_torch_and_transformers_in_the_background():
    """With transformers' model code: its modelling code too."""
    cli = "{'transformers_warm_imports': True, 'transformers_model_code': 'transformers'}"
    assert _run(PREWARM.replace("CLI", cli)) == ["True", "True"]


def test_warm_imports_leave_the_modelling_code_out_for_flexserv_model_code():
    """The default model code (auto) may run FlexServ's own forward: no modelling code."""
    assert _run(PREWARM.replace("CLI", "{'transformers_warm_imports': True}")) == ["True", "False"]


def test_warm_imports_are_off_by_default():
    assert _run(PREWARM.replace("CLI", "{}")) == ["False", "False"]
