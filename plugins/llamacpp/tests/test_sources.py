"""Which GGUF file a source names: the quantization syntax and its errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from flexserv_llamacpp.sources import choose_file, is_gguf_source, quant_of, resolve_gguf, split_quant

from flexserv_core import ModelLoadError, ModelSpec


@pytest.mark.parametrize(
    ("name", "quant"),
    [
        ("SmolLM2-135M-Instruct-Q4_1.gguf", "Q4_1"),
        ("qwen2.5-7b-instruct.q4_k_m.gguf", "Q4_K_M"),
        ("model-IQ3_XS.gguf", "IQ3_XS"),
        ("model.BF16.gguf", "BF16"),
        ("llama-3-70b-Q8_0-00001-of-00003.gguf", "Q8_0"),
        ("model.gguf", None),
        ("Q4_0model.gguf", None),
    ],
)
def test_the_quantization_in_a_file_name(name: str, quant: str | None) -> None:
    assert quant_of(name) == quant


def test_split_quant_only_takes_a_quantization_after_the_last_colon() -> None:
    assert split_quant("org/repo:q4_k_m") == ("org/repo", "Q4_K_M")
    assert split_quant("models/dir:Q8_0") == ("models/dir", "Q8_0")
    assert split_quant("org/repo") == ("org/repo", None)
    assert split_quant("C:weights") == ("C:weights", None)


def _dir(tmp_path: Path, *names: str) -> Path:
    for name in names:
        (tmp_path / name).write_bytes(b"GGUF")
    return tmp_path


def test_a_directory_quant_picks_its_file_and_a_missing_one_names_those_present(tmp_path: Path) -> None:
    d = _dir(tmp_path, "m.Q4_K_M.gguf", "m.Q8_0.gguf", "README.md")
    spec = ModelSpec(name="m", source=f"{d}:q8_0")
    assert resolve_gguf(spec) == d / "m.Q8_0.gguf"
    with pytest.raises(ModelLoadError) as info:
        resolve_gguf(ModelSpec(name="m", source=f"{d}:Q5_K_M"))
    assert "no Q5_K_M GGUF file" in info.value.message
    assert "Q4_K_M, Q8_0" in info.value.message  # the ones that are there, no silent fallback


def test_several_files_without_a_quant_is_an_error_and_one_file_is_chosen(tmp_path: Path) -> None:
    (tmp_path / "two").mkdir()
    two = _dir(tmp_path / "two", "a.Q4_0.gguf", "a.F16.gguf")
    with pytest.raises(ModelLoadError, match=r"choose one with NAME:QUANT.*F16, Q4_0"):
        resolve_gguf(ModelSpec(name="m", source=str(two)))
    (tmp_path / "one").mkdir()
    one = _dir(tmp_path / "one", "only.gguf")
    assert resolve_gguf(ModelSpec(name="m", source=str(one))) == one / "only.gguf"


def test_a_missing_file_and_a_quant_on_a_file_are_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="no GGUF file at"):
        resolve_gguf(ModelSpec(name="m", source=str(tmp_path / "absent.gguf")))
    f = _dir(tmp_path, "x.Q4_0.gguf") / "x.Q4_0.gguf"
    with pytest.raises(ModelLoadError, match="is a file"):
        resolve_gguf(ModelSpec(name="m", source=f"{f}:Q4_0"))


def test_offline_hub_repository_without_a_cached_copy_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match="Hub repository nobody/nothing-GGUF could not be read"):
        resolve_gguf(ModelSpec(name="m", source="nobody/nothing-GGUF:Q4_K_M"))


def test_which_sources_are_gguf(tmp_path: Path) -> None:
    assert is_gguf_source("a/b/model.gguf") and is_gguf_source("org/repo:Q4_K_M")
    assert not is_gguf_source("HuggingFaceTB/SmolLM2-135M-Instruct") and not is_gguf_source("fake://x.gguf")
    d = _dir(tmp_path, "m.Q4_0.gguf")
    assert is_gguf_source(str(d))
    (d / "config.json").write_text("{}")  # a checkpoint directory that also has a GGUF
    assert not is_gguf_source(str(d))


def test_choose_file_with_no_gguf() -> None:
    with pytest.raises(ModelLoadError, match=r"holds no \.gguf file"):
        choose_file(["a.bin"], None, "here")
