"""The GGUF conversion cache under faults: a corrupt, truncated or incomplete entry
is detected by its manifest and rebuilt; a full disk mid-conversion leaves the
cache as it was; a conversion killed half-way (a real process, SIGKILL) leaves
nothing a later load would use.

The dequantisation itself is replaced by a converter that writes a checkpoint-like
directory (its cost is 20 s and it is not what is under test); the real one is
exercised by the SmolLM2 tests.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from flexserv_transformers import loading
from flexserv_transformers.loading import MANIFEST, ensure_gguf_checkpoint, gguf_cache_path, verify_checkpoint

from flexserv_core import ModelLoadError

WEIGHTS = bytes(range(256)) * 4096  # 1 MiB


def fake_convert(gguf: Path, out_dir: Path, progress: Any) -> None:
    out_dir.mkdir(parents=True)
    (out_dir / "config.json").write_text(json.dumps({"from": gguf.name}))
    (out_dir / "model.safetensors").write_bytes(WEIGHTS)


class Converter:
    def __init__(self, fail_with: OSError | None = None) -> None:
        self.calls = 0
        self.fail_with = fail_with

    def __call__(self, gguf: Path, out_dir: Path, progress: Any) -> None:
        self.calls += 1
        if self.fail_with is None:
            fake_convert(gguf, out_dir, progress)
            return
        out_dir.mkdir(parents=True)
        with open(out_dir / "model.safetensors", "wb") as fh:
            fh.write(WEIGHTS[: len(WEIGHTS) // 2])  # half written, then the disk is full
            raise self.fail_with


@pytest.fixture
def gguf(tmp_path: Path) -> Path:
    path = tmp_path / "models" / "tiny.gguf"
    path.parent.mkdir()
    path.write_bytes(b"GGUF" + os.urandom(64))
    return path


@pytest.fixture
def converter(monkeypatch: pytest.MonkeyPatch) -> Converter:
    conv = Converter()
    monkeypatch.setattr(loading, "convert_gguf", conv)
    return conv


def convert(gguf: Path, cache: Path) -> Path:
    return ensure_gguf_checkpoint(gguf, cache, lambda message, fraction=None: None)


def leftovers(cache: Path) -> list[str]:
    return sorted(p.name for p in (cache / "gguf").iterdir() if p.name.startswith(".tmp"))


def test_a_complete_entry_is_reused_without_converting(gguf: Path, tmp_path: Path, converter: Converter) -> None:
    cache = tmp_path / "cache"
    target = convert(gguf, cache)
    manifest = json.loads((target / MANIFEST).read_text())
    assert set(manifest["files"]) == {"config.json", "model.safetensors"}
    assert manifest["files"]["model.safetensors"]["size"] == len(WEIGHTS)
    assert convert(gguf, cache) == target and converter.calls == 1
    assert verify_checkpoint(target) is None


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        ("truncate", "has 524288 bytes"),
        ("corrupt", "does not match its sha256"),
        ("delete", "is missing"),
        ("manifest", "unreadable manifest"),
        ("legacy", "lists no files"),
        ("no-manifest", "no manifest"),
    ],
)
def test_a_damaged_entry_is_detected_and_rebuilt(
    gguf: Path, tmp_path: Path, converter: Converter, damage: str, why: str
) -> None:
    cache = tmp_path / "cache"
    target = convert(gguf, cache)
    convert(gguf, cache)  # verified once: digests are memoised, the next check is by file identity
    weights = target / "model.safetensors"
    if damage == "truncate":
        with open(weights, "r+b") as fh:
            fh.truncate(len(WEIGHTS) // 2)
    elif damage == "corrupt":  # same size, one byte flipped: only the digest can tell
        data = bytearray(weights.read_bytes())
        data[1000] ^= 0xFF
        weights.write_bytes(bytes(data))
    elif damage == "delete":
        weights.unlink()
    elif damage == "manifest":
        (target / MANIFEST).write_text("{not json")
    elif damage == "legacy":
        (target / MANIFEST).write_text(json.dumps({"source": str(gguf), "sha256": "x"}))
    else:
        (target / MANIFEST).unlink()
    problem = verify_checkpoint(target, target.parent)
    assert problem is not None and why in problem
    assert convert(gguf, cache) == target
    assert converter.calls == 2, "the damaged entry was used instead of rebuilt"
    assert weights.read_bytes() == WEIGHTS and verify_checkpoint(target) is None
    assert leftovers(cache) == []


def test_a_full_disk_during_conversion_leaves_the_cache_as_it_was(
    gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    other = gguf.with_name("other.gguf")
    other.write_bytes(b"GGUF other")
    monkeypatch.setattr(loading, "convert_gguf", Converter())
    previous = convert(other, cache)  # an earlier conversion that must stay usable
    before = sorted(p.relative_to(cache).as_posix() for p in cache.rglob("*"))
    full = Converter(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    monkeypatch.setattr(loading, "convert_gguf", full)
    with pytest.raises(ModelLoadError) as caught:
        convert(gguf, cache)
    assert "No space left on device" in str(caught.value) and "unchanged" in str(caught.value)
    after = sorted(p.relative_to(cache).as_posix() for p in cache.rglob("*"))
    assert after == before, "a failed conversion left files behind"
    assert not gguf_cache_path(gguf, cache).exists()
    assert verify_checkpoint(previous) is None
    # space freed: the same load converts and succeeds
    monkeypatch.setattr(loading, "convert_gguf", Converter())
    assert verify_checkpoint(convert(gguf, cache)) is None


def test_a_full_disk_for_the_digest_memo_does_not_fail_the_load(
    gguf: Path, tmp_path: Path, converter: Converter, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_space(path: Path, text: str) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    target = convert(gguf, tmp_path / "cache")
    monkeypatch.setattr(loading, "_write_atomic", no_space)
    assert convert(gguf, tmp_path / "cache") == target and converter.calls == 1


KILLED_CONVERSION = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from flexserv_transformers import loading

    def stuck(gguf, out_dir, progress):
        out_dir.mkdir(parents=True)
        (out_dir / "config.json").write_text("{}")
        with open(out_dir / "model.safetensors", "wb") as fh:
            fh.write(b"half")
            fh.flush()
            print("converting", flush=True)
            time.sleep(120)

    loading.convert_gguf = stuck
    loading.ensure_gguf_checkpoint(Path(sys.argv[1]), Path(sys.argv[2]), lambda m, f=None: None)
    """
)


@pytest.mark.slow  # starts a process
def test_a_conversion_killed_half_way_leaves_nothing_a_load_would_use(
    gguf: Path, tmp_path: Path, converter: Converter
) -> None:
    cache = tmp_path / "cache"
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_CONVERSION, str(gguf), str(cache)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "converting"
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    target = gguf_cache_path(gguf, cache)
    assert not target.exists(), "a killed conversion published an entry"
    assert len(leftovers(cache)) == 1  # its temporary directory, removed once it is an hour old
    assert convert(gguf, cache) == target and converter.calls == 1
    assert verify_checkpoint(target) is None and (target / "model.safetensors").read_bytes() == WEIGHTS


def test_conversion_progress_gives_the_files_size_not_one_models_timing(tmp_path: Path, monkeypatch) -> None:
    # "15-20 s" is SmolLM2-135M's; a several-GB GGUF takes minutes
    import transformers

    gguf = tmp_path / "big.gguf"
    gguf.write_bytes(WEIGHTS * 3)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: object())

    def stop(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("stop here")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", stop)
    said: list[str] = []
    with pytest.raises(ModelLoadError):
        loading.convert_gguf(gguf, tmp_path / "out", lambda message, fraction: said.append(message))
    assert said[-1] == "converting big.gguf: dequantising 3 MB of weights (most of the conversion's time)"
