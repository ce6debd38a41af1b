"""Context and KV-cache sizing from a GGUF's metadata, before loading."""

from __future__ import annotations

from pathlib import Path

import pytest
from flexserv_llamacpp.gguf_info import GgufInfo, _int, read_gguf_info
from flexserv_llamacpp.sizing import available_memory, kv_bytes_per_token, plan_context

from flexserv_core import ModelLoadError


def test_the_embedded_gguf_metadata(smollm_gguf: Path) -> None:
    info = read_gguf_info(smollm_gguf)
    assert info.architecture == "llama" and info.context_length == 8192
    # SmolLM2-135M: 30 layers, 3 KV heads of 64: 30 * 3 * (64 + 64) * 2 bytes per token
    assert (info.n_layers, info.n_kv_heads, info.key_length) == (30, 3, 64)
    assert kv_bytes_per_token(info) == 23040
    assert info.chat_template and "<|im_start|>" in info.chat_template


def test_the_metadata_equals_what_ggufs_own_reader_finds(smollm_gguf: Path) -> None:
    gguf = pytest.importorskip("gguf")
    fields = gguf.GGUFReader(str(smollm_gguf), "r").fields
    info = read_gguf_info(smollm_gguf)
    assert info.chat_template == fields["tokenizer.chat_template"].contents()
    assert info.context_length == fields["llama.context_length"].contents()
    assert info.n_kv_heads == fields["llama.attention.head_count_kv"].contents()


def test_geometry_llama_cpp_leaves_out_is_read_with_ggufs_reader(
    smollm_gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """llama.cpp's model metadata has no array-valued keys (per-layer head counts of
    some architectures): those are read again, so the KV cache is never sized from a
    default."""
    from flexserv_llamacpp import gguf_info

    real = gguf_info._metadata

    def without_head_counts(path: Path) -> dict[str, str]:
        return {k: v for k, v in real(path).items() if "head_count" not in k}

    monkeypatch.setattr(gguf_info, "_metadata", without_head_counts)
    info = read_gguf_info(smollm_gguf)
    assert (info.n_kv_heads, info.key_length, kv_bytes_per_token(info)) == (3, 64, 23040)


def test_a_per_layer_array_counts_its_largest_entry() -> None:
    assert _int("[2, 4, 8, 4]") == 8
    assert _int("32") == 32 and _int(None, 7) == 7 and _int("", 3) == 3


def test_not_a_gguf_is_a_load_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf at all")
    with pytest.raises(ModelLoadError, match="not a readable GGUF"):
        read_gguf_info(bad)


INFO = GgufInfo(Path("m.gguf"), "llama", 8192, 30, 3, 64, 64, None, 100 * 2**20)


def test_the_context_comes_from_the_metadata_and_may_be_overridden() -> None:
    auto = plan_context(INFO, name="m", context_length=0, kv_cache_tokens=0, available=None)
    assert (auto.context_length, auto.kv_cells, auto.kv_bytes) == (8192, 8192, 8192 * 23040)
    small = plan_context(INFO, name="m", context_length=2048, kv_cache_tokens=0, available=None)
    assert (small.context_length, small.kv_cells) == (2048, 2048)
    pooled = plan_context(INFO, name="m", context_length=2048, kv_cache_tokens=16384, available=None)
    assert (pooled.context_length, pooled.kv_cells) == (2048, 16384)
    capped = plan_context(INFO, name="m", context_length=0, kv_cache_tokens=4096, available=None)
    assert capped.context_length == 4096  # the metadata's context, capped by the cache set


def test_a_context_that_does_not_fit_is_refused_with_the_numbers() -> None:
    with pytest.raises(ModelLoadError, match="context of 8192 tokens does not fit in a KV cache of 4096"):
        plan_context(INFO, name="m", context_length=8192, kv_cache_tokens=4096, available=None)
    with pytest.raises(ModelLoadError) as info:
        plan_context(INFO, name="m", context_length=0, kv_cache_tokens=0, available=150 * 2**20)
    message = info.value.message
    assert "needs 180 MiB" in message and "22.5 KiB per token" in message and "only 150 MiB" in message
    assert "about 2275 tokens" in message


def test_available_memory_reads_meminfo(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 100 kB\nMemAvailable:   2048 kB\n")
    assert available_memory(meminfo) == 2048 * 1024
    assert available_memory(tmp_path / "absent") is None


def test_a_q8_0_cache_takes_34_bytes_per_32_values() -> None:
    f16 = plan_context(INFO, name="m", context_length=0, kv_cache_tokens=4096, available=None)
    q8 = plan_context(INFO, name="m", context_length=0, kv_cache_tokens=4096, available=None, kv_cache_type="q8_0")
    assert f16.kv_bytes == 4096 * 23040 and q8.kv_bytes == 4096 * 12240 == f16.kv_bytes * 34 // 64
    assert "KV cache 4096 tokens of q8_0 = 48 MiB" in q8.describe()
    # the memory check counts q8_0 bytes: what fits as q8_0 is refused as f16
    fits = q8.kv_bytes + INFO.file_size
    plan_context(INFO, name="m", context_length=0, kv_cache_tokens=4096, available=fits, kv_cache_type="q8_0")
    with pytest.raises(ModelLoadError, match=r"4096 tokens \(f16\) needs 90 MiB"):
        plan_context(INFO, name="m", context_length=0, kv_cache_tokens=4096, available=fits)


@pytest.mark.parametrize(
    ("cache", "flash", "draft", "expected"),
    [
        ("auto", "auto", 0, "f16"),  # llama.cpp's default: faster at long contexts
        ("auto", "auto", 8, "q8_0"),  # speculation needs rows computed alike in any batch
        ("auto", "on", 8, "q8_0"),
        ("auto", "off", 8, "f16"),  # llama.cpp quantizes the V cache only with flash attention
        ("f16", "auto", 8, "f16"),
        ("q8_0", "on", 0, "q8_0"),
    ],
)
def test_the_kv_cache_type_setting(cache: str, flash: str, draft: int, expected: str) -> None:
    from flexserv_llamacpp.backend import kv_cache_type_of
    from flexserv_llamacpp.settings import LlamaCppSettings

    s = LlamaCppSettings(
        llamacpp_kv_cache_type=cache,  # type: ignore[arg-type]
        llamacpp_flash_attention=flash,  # type: ignore[arg-type]
        llamacpp_speculative_draft_tokens=draft,
    )
    assert kv_cache_type_of(s) == expected


def test_a_q8_0_cache_without_flash_attention_is_refused_naming_both_settings() -> None:
    from flexserv_llamacpp.backend import kv_cache_type_of
    from flexserv_llamacpp.settings import LlamaCppSettings

    s = LlamaCppSettings(llamacpp_kv_cache_type="q8_0", llamacpp_flash_attention="off")
    with pytest.raises(ModelLoadError) as info:
        kv_cache_type_of(s)
    assert "--llamacpp-kv-cache-type" in info.value.message and "--llamacpp-flash-attention" in info.value.message


def test_speculation_is_off_by_default() -> None:
    from flexserv_llamacpp.settings import LlamaCppSettings

    assert LlamaCppSettings().llamacpp_speculative_draft_tokens == 0
