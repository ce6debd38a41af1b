"""Which GGUF file a model's source names: a file, or ``NAME:QUANT`` of a directory
or Hub repository holding several quantizations.

* ``path/model.Q4_K_M.gguf``: that file.
* ``path/dir:Q8_0``: the file of ``dir`` whose name carries the quantization
  ``Q8_0`` (case-insensitive); ``path/dir`` alone: its only GGUF file.
* ``org/repo:Q4_K_M``: the same choice among the repository's files; only that
  file is downloaded (offline: the copy in the Hub cache).

A quantization that is not there is an error naming the ones that are: no silent
fallback to another file.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from flexserv_core import ModelLoadError, ModelSpec

#: A quantization in a file name: ``Q4_K_M``, ``IQ3_XS``, ``Q8_0``, ``F16``, ``BF16``...
#: between separators, ending at ``.gguf`` or at a further separator (split files).
_PARTS = r"(?:I?Q[1-8](?:_(?:K|[SML]|XX?S|NL|[0-9]))*|BF16|F16|F32)"
_QUANT_IN_NAME = re.compile(rf"(?<![A-Za-z0-9])({_PARTS})(?=\.gguf$|[.\-])", re.I)
#: What may follow the last ``:`` of a source as its quantization.
_QUANT = re.compile(rf"^{_PARTS}$", re.I)


def quant_of(filename: str) -> str | None:
    """The quantization a GGUF file name carries, upper-cased (``None``: none)."""
    found = _QUANT_IN_NAME.findall(Path(filename).name)
    return found[-1].upper() if found else None


def split_quant(source: str) -> tuple[str, str | None]:
    """``NAME:QUANT`` -> ``(NAME, "QUANT")``; other sources -> ``(source, None)``."""
    base, sep, tail = source.rpartition(":")
    if sep and base and _QUANT.match(tail):
        return base, tail.upper()
    return source, None


def is_gguf_source(source: str) -> bool:
    """Whether ``source`` names a GGUF: a ``.gguf`` file, ``NAME:QUANT``, or a
    local directory whose model files are GGUF (no ``config.json``)."""
    if "://" in source:
        return False
    if source.lower().endswith(".gguf"):
        return True
    if split_quant(source)[1] is not None:
        return True
    path = Path(source)
    try:
        return path.is_dir() and not (path / "config.json").exists() and any(path.glob("*.gguf"))
    except OSError:
        return False


def choose_file(names: list[str], quant: str | None, where: str) -> str:
    """The one of ``names`` (GGUF file names) that ``quant`` selects; a
    :class:`ModelLoadError` naming the quantizations present otherwise."""
    ggufs = sorted(n for n in names if n.lower().endswith(".gguf"))
    if not ggufs:
        raise ModelLoadError(f"{where} holds no .gguf file.", param="model")
    present = sorted({q for q in (quant_of(n) for n in ggufs) if q})
    if quant is None:
        if len(ggufs) == 1:
            return ggufs[0]
        raise ModelLoadError(
            f"{where} holds {len(ggufs)} GGUF files; choose one with NAME:QUANT "
            f"(present: {', '.join(present) or 'none with a quantization in its name'}).",
            param="model",
        )
    matches = [n for n in ggufs if quant_of(n) == quant]
    if not matches:
        raise ModelLoadError(
            f"{where} has no {quant} GGUF file; the quantizations present are: {', '.join(present) or 'none'}.",
            param="model",
        )
    # of a split model (-00001-of-00003) the first part: llama.cpp finds the others
    return matches[0]


def resolve_gguf(spec: ModelSpec, *, offline: bool | None = None) -> Path:
    """The local GGUF file ``spec`` names, downloading it from the Hub if needed."""
    base, quant = split_quant(spec.source)
    path = Path(base).expanduser()
    if path.is_file():
        if quant is not None:
            raise ModelLoadError(
                f"Model '{spec.name}': {base} is a file; :{quant} selects among the files of a directory."
            )
        return path
    if path.is_dir():
        names = [p.name for p in path.iterdir() if p.is_file()]
        return path / choose_file(names, quant, f"Model '{spec.name}': the directory {base}")
    if base.lower().endswith(".gguf") or path.is_absolute() or base.startswith("."):
        raise ModelLoadError(f"Model '{spec.name}': no GGUF file at {base}.", param="model")
    return _from_hub(spec, base, quant, offline)


def _from_hub(spec: ModelSpec, repo: str, quant: str | None, offline: bool | None) -> Path:
    import huggingface_hub

    if offline is None:
        offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0", "false", "False")
    where = f"Model '{spec.name}': the Hub repository {repo}"
    try:
        if offline:
            snapshot = Path(
                huggingface_hub.snapshot_download(
                    repo, revision=spec.revision, local_files_only=True, allow_patterns=["*.gguf"]
                )
            )
            names = [p.name for p in snapshot.glob("*.gguf")]
            return snapshot / choose_file(names, quant, f"{where} (offline, its cached files)")
        names = huggingface_hub.list_repo_files(repo, revision=spec.revision)
        chosen = choose_file(names, quant, where)
        return Path(huggingface_hub.hf_hub_download(repo, chosen, revision=spec.revision))
    except ModelLoadError:
        raise
    except Exception as exc:  # offline without a cached copy, unknown repo, network errors
        raise ModelLoadError(f"{where} could not be read: {exc}", param="model") from exc
