"""Sources, the GGUF conversion cache, loading errors and the backend's settings."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from flexserv_transformers import loading
from flexserv_transformers.backend import EMBEDDED_MODEL_NAME, embedded_gguf, embedded_spec
from flexserv_transformers.engine_api import DEFAULT_ENGINE
from flexserv_transformers.settings import TransformersSettings, resolve_dtype
from flexserv_transformers.testing import SMOLLM2_MISSING

from flexserv_core import CoreSettings, ModelKind, ModelLoadError, ModelSpec, UsageError, resolve_settings
from flexserv_core.testing import make_app


def spec(source: str, **options: object) -> ModelSpec:
    return ModelSpec(name="m", kind=ModelKind.TEXT, source=source, options=dict(options))


def noop(message: str, fraction: float | None = None) -> None:
    pass


# --- sources ---------------------------------------------------------------------------


@pytest.mark.slow
def test_resolve_source_kinds(tmp_path, tiny_dir):
    assert loading.resolve_source(spec(str(tiny_dir))).kind == "dir"
    gguf = tmp_path / "x.gguf"
    gguf.write_bytes(b"GGUF")
    assert loading.resolve_source(spec(str(gguf))) == loading.ResolvedSource(kind="gguf", location=str(gguf.resolve()))
    assert loading.resolve_source(spec(str(tmp_path), gguf_file="x.gguf")).kind == "gguf"
    assert loading.resolve_source(spec("HuggingFaceTB/SmolLM2-135M-Instruct")).kind == "hub"


def test_missing_directory(tmp_path, load_model):
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model(spec(str(tmp_path / "nope")), tmp_path)


def test_directory_without_checkpoint(tmp_path, load_model):
    with pytest.raises(ModelLoadError, match=r"no config\.json"):
        load_model(spec(str(tmp_path)), tmp_path)


def test_file_that_is_not_gguf(tmp_path, load_model):
    f = tmp_path / "weights.bin"
    f.write_bytes(b"\0" * 16)
    with pytest.raises(ModelLoadError, match=r"not a \.gguf file"):
        load_model(spec(str(f)), tmp_path)


def test_bad_gguf(tmp_path, load_model):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"this is not a gguf file at all" * 100)
    with pytest.raises(ModelLoadError, match="could not be read as a GGUF model"):
        load_model(spec(str(bad)), tmp_path / "cache")
    root = tmp_path / "cache" / "gguf"
    assert not [p for p in root.iterdir() if p.is_dir()]  # neither a cache entry nor a temp dir is left


def test_offline_hub_id(tmp_path, load_model, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty local cache
    with pytest.raises(ModelLoadError, match=r"not in the local Hugging Face cache and the Hub is offline"):
        load_model(spec("flexserv-test/definitely-not-cached"), tmp_path)


# --- conversion cache --------------------------------------------------------------------


def fake_convert(calls: list[Path]):
    def convert(gguf: Path, out_dir: Path, progress) -> None:
        calls.append(gguf)
        out_dir.mkdir(parents=True)
        (out_dir / "config.json").write_text("{}")

    return convert


def test_cache_is_keyed_by_content_and_reused(tmp_path, monkeypatch):
    calls: list[Path] = []
    monkeypatch.setattr(loading, "convert_gguf", fake_convert(calls))
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"version 1")
    cache = tmp_path / "cache"
    first = loading.ensure_gguf_checkpoint(gguf, cache, noop)
    again = loading.ensure_gguf_checkpoint(gguf, cache, noop)
    assert first == again and calls == [gguf]
    manifest = json.loads((first / loading.MANIFEST).read_text())
    assert manifest["source"] == str(gguf) and first.name.endswith(manifest["sha256"])

    gguf.write_bytes(b"version 2")  # a changed file is converted again
    changed = loading.ensure_gguf_checkpoint(gguf, cache, noop)
    assert changed != first and len(calls) == 2
    assert sorted(p.name for p in (cache / "gguf").iterdir() if p.is_dir()) == sorted([first.name, changed.name])


def test_hash_memo_follows_file_identity(tmp_path):
    f = tmp_path / "a.gguf"
    f.write_bytes(b"abc")
    memo_dir = tmp_path / "memo"
    digest = loading.file_sha256(f, memo_dir)
    assert digest == loading.file_sha256(f, memo_dir) == loading.file_sha256(f)
    f.write_bytes(b"abd")
    assert loading.file_sha256(f, memo_dir) != digest


def test_interrupted_conversion_leaves_no_cache(tmp_path, monkeypatch):
    def half_then_fail(gguf: Path, out_dir: Path, progress) -> None:
        out_dir.mkdir(parents=True)
        (out_dir / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(loading, "convert_gguf", half_then_fail)
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"x")
    with pytest.raises(KeyboardInterrupt):
        loading.ensure_gguf_checkpoint(gguf, tmp_path / "cache", noop)
    assert not [p for p in (tmp_path / "cache" / "gguf").iterdir() if p.is_dir()]
    # a directory without its manifest (left by something else) is not trusted: it is replaced
    calls: list[Path] = []
    monkeypatch.setattr(loading, "convert_gguf", fake_convert(calls))
    target = loading.gguf_cache_path(gguf, tmp_path / "cache")
    target.mkdir()
    (target / "model.safetensors").write_bytes(b"half")
    assert loading.ensure_gguf_checkpoint(gguf, tmp_path / "cache", noop) == target
    assert calls == [gguf] and (target / loading.MANIFEST).is_file() and not (target / "model.safetensors").exists()


def test_stale_temp_dirs_are_removed(tmp_path, monkeypatch):
    monkeypatch.setattr(loading, "convert_gguf", fake_convert([]))
    root = tmp_path / "cache" / "gguf"
    stale = root / ".tmp-old-1-abc"
    stale.mkdir(parents=True)
    os.utime(stale, (0, 0))
    fresh = root / ".tmp-new-2-def"
    fresh.mkdir()
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"x")
    loading.ensure_gguf_checkpoint(gguf, tmp_path / "cache", noop)
    assert not stale.exists() and fresh.exists()


@pytest.mark.slow
def test_embedded_model_second_load_uses_the_cache(smollm, smollm_spec, flexserv_test_cache, load_model, monkeypatch):
    """The session's ``smollm`` converted the GGUF (at most once); loading again must not.
    (A bf16 or fp16 load of the session adds its ``-bfloat16``/``-float16`` copy beside it.)"""
    entries = [
        p
        for p in (flexserv_test_cache / "gguf").iterdir()
        if p.is_dir() and p.name.startswith(EMBEDDED_MODEL_NAME) and not p.name.endswith(("-bfloat16", "-float16"))
    ]
    assert len(entries) == 1 and (entries[0] / loading.MANIFEST).is_file()
    stamp = (entries[0] / loading.MANIFEST).stat().st_mtime_ns

    def no_conversion(*args: object) -> None:
        raise AssertionError("the GGUF was converted again")

    monkeypatch.setattr(loading, "convert_gguf", no_conversion)
    model = load_model(smollm_spec, flexserv_test_cache, dtype="float32")
    try:
        # The converted checkpoint keeps the GGUF's context; the served limit may be less
        # when the engine's KV pool holds fewer tokens (float32 here).
        assert model.engine_model.context_length == 8192
        assert model.limits.context_length == min(8192, model.engine.max_sequence_tokens)
    finally:
        model.unload()
    assert (entries[0] / loading.MANIFEST).stat().st_mtime_ns == stamp


# --- embedded default --------------------------------------------------------------------


def test_embedded_default_spec():
    path = embedded_gguf()
    if path is None:
        pytest.fail(SMOLLM2_MISSING)
    s = embedded_spec()
    assert s is not None and s.name == EMBEDDED_MODEL_NAME and s.kind == ModelKind.TEXT
    # no backend named: TransformersBackend.preference decides against llama.cpp's claim
    assert s.backend is None and s.origin == "embedded" and Path(s.source) == path and path.suffix == ".gguf"


def test_no_embedded_default_without_the_package(monkeypatch):
    import importlib.metadata

    def missing(name: str):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", missing)
    assert embedded_gguf() is None and embedded_spec() is None


# --- settings ----------------------------------------------------------------------------


def test_settings_from_environment():
    s = resolve_settings(
        [CoreSettings, TransformersSettings],
        cli={},
        env={"FLEXSERV_DEVICE": "cpu", "FLEXSERV_DTYPE": "float32", "FLEXSERV_TRUST_REMOTE_CODE": "1"},
    )
    ts = s.get(TransformersSettings)
    assert ts.transformers_device == "cpu" and ts.transformers_dtype == "float32"  # the spec's spellings
    assert ts.transformers_trust_remote_code is False  # command line only
    assert s.get(TransformersSettings).transformers_engine == DEFAULT_ENGINE == "paged"


def test_prefixed_names_win_over_the_spec_aliases(tmp_path):
    config = tmp_path / "flexserv.toml"
    config.write_text('dtype = "bfloat16"\ntransformers_default_max_tokens = 7\ndefault_max_tokens = 9\n')
    env = {"FLEXSERV_DEVICE": "cuda", "FLEXSERV_TRANSFORMERS_DEVICE": "cpu"}
    ts = resolve_settings([CoreSettings, TransformersSettings], cli={}, env=env, config_file=config).get(
        TransformersSettings
    )
    assert (ts.transformers_device, ts.transformers_dtype, ts.transformers_default_max_tokens) == (
        "cpu",
        "bfloat16",
        7,
    )


def test_auto_dtype_on_cpu():
    import torch
    from flexserv_torch import cpu_has_fast_bf16

    expected = torch.bfloat16 if cpu_has_fast_bf16() else torch.float32
    assert resolve_dtype("auto", torch.device("cpu")) is expected
    assert resolve_dtype("float32", torch.device("cpu")) is torch.float32
    with pytest.raises(UsageError, match="float16 is not supported on CPU"):
        resolve_dtype("float16", torch.device("cpu"))


@pytest.mark.parametrize(
    "env", [{"ATEN_CPU_CAPABILITY": "avx2"}, {"ONEDNN_MAX_CPU_ISA": "AVX2"}, {"ATEN_CPU_CAPABILITY": "default"}]
)
def test_auto_dtype_is_float32_when_the_environment_caps_the_cpu_at_avx2(monkeypatch, env):
    """As on a real AVX2-only CPU, even on a machine with AMX (which is how AVX2 is emulated)."""
    import torch

    for name in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    assert resolve_dtype("auto", torch.device("cpu")) is torch.bfloat16
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert resolve_dtype("auto", torch.device("cpu")) is torch.float32


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"quantization": "bnb-4bit", "device": "cpu"}, r"bitsandbytes quantization needs a CUDA GPU"),
        ({"transformers_engine": "warp-drive"}, r"invalid value for setting 'transformers_engine'"),
        ({"device": "tpu"}, r"invalid value for setting 'transformers_device' \(--transformers-device\)"),
    ],
)
def test_bad_settings_stop_start_up(settings, message):
    with pytest.raises(UsageError, match=message):
        make_app(["transformers"], settings=settings)


@pytest.mark.slow
def test_quantization_without_cuda_is_a_load_error(tmp_path, tiny_spec, load_model):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ModelLoadError, match="needs a CUDA GPU"):
        load_model(tiny_spec, tmp_path, quantization="bnb-8bit")


def test_narrow_dtype_gets_its_own_entry_built_once_from_the_float32_one(tmp_path, monkeypatch):
    converted: list[Path] = []
    cast: list[tuple[Path, str]] = []

    def fake_cast(source: Path, out_dir: Path, dtype: object, progress) -> None:
        cast.append((source, str(dtype)))
        out_dir.mkdir(parents=True)
        (out_dir / "config.json").write_text('{"dtype": "bfloat16"}')

    monkeypatch.setattr(loading, "convert_gguf", fake_convert(converted))
    monkeypatch.setattr(loading, "cast_checkpoint", fake_cast)
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"weights")
    cache = tmp_path / "cache"
    base = loading.ensure_gguf_checkpoint(gguf, cache, noop)
    narrow = loading.ensure_gguf_checkpoint(gguf, cache, noop, "torch.bfloat16")
    assert narrow == base.with_name(base.name + "-bfloat16") and (narrow / loading.MANIFEST).is_file()
    assert loading.ensure_gguf_checkpoint(gguf, cache, noop, "torch.bfloat16") == narrow
    assert converted == [gguf] and cast == [(base, "torch.bfloat16")]  # each built once
    assert loading.ensure_gguf_checkpoint(gguf, cache, noop, "torch.float32") == base
    (narrow / "config.json").write_text("{}")  # a damaged copy is rebuilt from the float32 entry
    assert loading.ensure_gguf_checkpoint(gguf, cache, noop, "torch.bfloat16") == narrow
    assert len(cast) == 2 and converted == [gguf]


@pytest.mark.slow
def test_cast_checkpoint_gives_the_tensors_of_a_narrow_load(tmp_path, tiny_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "bf16"
    loading.cast_checkpoint(tiny_dir, out, torch.bfloat16, noop)
    copied = AutoModelForCausalLM.from_pretrained(out, dtype=torch.bfloat16).state_dict()
    direct = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.bfloat16).state_dict()
    assert copied.keys() == direct.keys()
    assert all(copied[k].dtype == torch.bfloat16 and torch.equal(copied[k], direct[k]) for k in direct)
    # half the bytes on disk, and the tokenizer came along
    size = sum(p.stat().st_size for p in out.glob("*.safetensors"))
    assert size < 0.6 * sum(p.stat().st_size for p in tiny_dir.glob("*.safetensors"))
    assert AutoTokenizer.from_pretrained(out).encode("hello world") == AutoTokenizer.from_pretrained(tiny_dir).encode(
        "hello world"
    )
