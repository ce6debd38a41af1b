"""Turning a configured source into a causal LM and its tokenizer.

Sources (configuration only; a request never names one):

* a local directory holding a transformers checkpoint;
* a ``.gguf`` file (or a directory plus ``options["gguf_file"]``): transformers
  dequantises it at load (15-20 s), so the result is converted once into a plain
  checkpoint under ``<cache_dir>/gguf/<name>-<sha256>`` and loaded from there
  afterwards (well under a second). The cache is keyed by the file's sha256, so a
  changed file is converted again, and written to a temporary directory that is
  renamed into place, so an interrupted (killed, disk full) conversion never
  leaves a half cache. Its manifest lists every file with size and sha256; an
  entry that no longer matches (truncated, corrupted, a file missing, a manifest
  from an older version) is removed and converted again;
* anything else is a Hugging Face Hub id (offline without a local copy, that
  is a :class:`ModelLoadError` saying so).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from flexserv_core import ModelLoadError

if TYPE_CHECKING:
    from typing import TypeAlias

    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase, ProcessorMixin

    from flexserv_core import ModelSpec, ProgressCallback
    from flexserv_transformers.native.llama import LlamaForCausalLM as FlexServLlama
    from flexserv_transformers.text_tokenizer import TextTokenizer

    #: What a load returns: transformers' model, or FlexServ's own Llama forward.
    CausalLM: TypeAlias = PreTrainedModel | FlexServLlama

log = logging.getLogger(__name__)

#: Written last into a converted checkpoint; its presence marks a complete cache entry.
MANIFEST = "flexserv-gguf.json"
_HASH_MEMO = "sha256-memo.json"
_STALE_TMP_SECONDS = 3600.0


class LoadOptions(msgspec.Struct, kw_only=True, frozen=True):
    """How to load: resolved device and dtype plus the backend's other settings."""

    device: Any  # torch.device
    dtype: Any  # torch.dtype
    cache_dir: Path
    attn_implementation: str | None = None
    trust_remote_code: bool = False
    quantization: str = "none"
    #: ``--transformers-model-code``; ``"transformers"`` unless the backend says otherwise.
    model_code: str = "transformers"
    engine: str = "paged"


class ResolvedSource(msgspec.Struct, kw_only=True, frozen=True):
    kind: str  # "dir", "gguf" or "hub"
    location: str
    gguf_file: str | None = None


# --- where a source points ------------------------------------------------------------


def _looks_like_path(source: str) -> bool:
    return (
        source.startswith(("/", "./", "../", "~", "\\"))
        or os.path.isabs(source)
        or source.lower().endswith(".gguf")
        or "\\" in source
    )


def resolve_source(spec: ModelSpec) -> ResolvedSource:
    """Classify ``spec.source``; raise :class:`ModelLoadError` for a missing path."""
    source = spec.source
    gguf_option = spec.options.get("gguf_file")
    path = Path(source).expanduser()
    if path.exists() or _looks_like_path(source):
        if not path.exists():
            raise ModelLoadError(
                f"Model '{spec.name}': the source {source!r} does not exist (no such file or directory)."
            )
        if path.is_file():
            if path.suffix.lower() != ".gguf":
                raise ModelLoadError(
                    f"Model '{spec.name}': {source!r} is a file but not a .gguf file; give a checkpoint directory, a .gguf file or a Hub id."
                )
            return ResolvedSource(kind="gguf", location=str(path.resolve()))
        if gguf_option:
            gguf = path / gguf_option
            if not gguf.is_file():
                raise ModelLoadError(f"Model '{spec.name}': gguf_file {gguf_option!r} is not in {source!r}.")
            return ResolvedSource(kind="gguf", location=str(gguf.resolve()))
        if not (path / "config.json").is_file():
            raise ModelLoadError(
                f"Model '{spec.name}': the directory {source!r} is not a transformers checkpoint (it has no config.json)."
            )
        return ResolvedSource(kind="dir", location=str(path.resolve()))
    return ResolvedSource(kind="hub", location=source, gguf_file=gguf_option)


# --- GGUF conversion cache ------------------------------------------------------------


def file_sha256(path: Path, memo_dir: Path | None = None) -> str:
    """The file's sha256. With ``memo_dir``, reuse the digest recorded for the same
    file identity (inode, size, mtime and ctime in ns); any write changes ctime."""
    st = path.stat()
    identity = [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    memo_path = memo_dir / _HASH_MEMO if memo_dir else None
    memo: dict[str, Any] = {}
    if memo_path is not None:
        try:
            memo = json.loads(memo_path.read_text())
        except (OSError, ValueError):
            memo = {}
        hit = memo.get(str(path))
        if isinstance(hit, dict) and hit.get("identity") == identity:
            recorded = hit.get("sha256")
            if isinstance(recorded, str):
                return recorded
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            digest.update(chunk)
    sha = digest.hexdigest()
    if memo_path is not None:
        memo[str(path)] = {"identity": identity, "sha256": sha}
        try:
            _write_atomic(memo_path, json.dumps(memo, indent=1))
        except OSError as exc:  # a full disk costs a re-hash next time, not the load
            log.warning("could not record the sha256 of %s in %s: %s", path, memo_path, exc)
    return sha


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def gguf_cache_path(gguf: Path, cache_dir: Path) -> Path:
    """Where the converted checkpoint of ``gguf`` lives (whether or not it exists yet)."""
    root = cache_dir / "gguf"
    return root / f"{gguf.stem}-{file_sha256(gguf, root)[:32]}"


def ensure_gguf_checkpoint(gguf: Path, cache_dir: Path, progress: ProgressCallback, dtype: Any = None) -> Path:
    """Return a plain checkpoint directory for ``gguf``, converting it on first use
    (or again when the cached entry fails :func:`verify_checkpoint`).

    The conversion is kept in float32. With a ``dtype`` of 16 bits a copy in that
    dtype is cached beside it and returned: loading it maps the file's weights as
    they are (no float32 pages read and cast at each load, no anonymous copy of the
    weights), and its tensors are the ones a load of the float32 entry in that
    dtype gives, so outputs do not change.
    """
    progress(f"checking the conversion cache for {gguf.name}", None)
    target = gguf_cache_path(gguf, cache_dir)
    sha = target.name.rsplit("-", 1)[1]
    base = _ensure_entry(target, gguf, sha, lambda tmp: convert_gguf(gguf, tmp, progress))
    name = _narrow_dtype_name(dtype)
    if name is None:
        return base
    variant = target.with_name(f"{target.name}-{name}")
    return _ensure_entry(variant, gguf, sha, lambda tmp: cast_checkpoint(base, tmp, dtype, progress))


def _narrow_dtype_name(dtype: Any) -> str | None:
    """``"bfloat16"`` / ``"float16"`` for those dtypes, else ``None`` (kept in float32)."""
    name = str(dtype).removeprefix("torch.") if dtype is not None else ""
    return name if name in ("bfloat16", "float16") else None


def _ensure_entry(target: Path, gguf: Path, sha: str, build: Callable[[Path], None]) -> Path:
    """``target`` if it verifies, else built by ``build(tmp)`` and renamed into place."""
    root = target.parent
    if target.exists():
        problem = verify_checkpoint(target, root)
        if problem is None:
            log.info("GGUF %s: using the converted checkpoint %s", gguf.name, target)
            return target
        log.warning("GGUF %s: the cached checkpoint %s is unusable (%s): converting again", gguf.name, target, problem)
        _discard(target)
    started = time.perf_counter()
    root.mkdir(parents=True, exist_ok=True)
    _remove_stale_tmp(root)
    tmp = root / f".tmp-{target.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        build(tmp)
        _write_atomic(
            tmp / MANIFEST,
            json.dumps(
                {
                    "source": str(gguf),
                    "sha256": sha,
                    "created": time.time(),
                    "seconds": time.perf_counter() - started,
                    "files": _file_table(tmp),
                },
                indent=1,
            ),
        )
        try:
            os.rename(tmp, target)
        except OSError:
            if verify_checkpoint(target, root) is None:  # another process finished the same conversion first
                pass
            else:  # an incomplete leftover (not written by this code): replace it
                _discard(target)
                os.rename(tmp, target)
    except OSError as exc:  # ENOSPC, EIO, a read-only cache: nothing half-written stays behind
        raise ModelLoadError(
            f"Converting {gguf.name} into the cache {root} failed: {exc.strerror or exc}. "
            "The cache is unchanged; free space (or set --cache-dir) and retry."
        ) from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("GGUF %s converted in %.1f s into %s", gguf.name, time.perf_counter() - started, target)
    return target


def _file_table(directory: Path) -> dict[str, dict[str, Any]]:
    """Size and sha256 of every file under ``directory`` (the manifest's ``files``)."""
    table: dict[str, dict[str, Any]] = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file() and p.name != MANIFEST):
        table[path.relative_to(directory).as_posix()] = {"size": path.stat().st_size, "sha256": file_sha256(path)}
    return table


def verify_checkpoint(target: Path, memo_dir: Path | None = None) -> str | None:
    """``None`` when ``target`` holds every file its manifest lists, with the same
    size and sha256; else what is wrong. Digests are memoised in ``memo_dir`` by
    file identity, so a check of an unchanged entry reads no weights."""
    try:
        manifest = json.loads((target / MANIFEST).read_text())
    except FileNotFoundError:
        return "no manifest (an interrupted conversion)"
    except (OSError, ValueError) as exc:
        return f"unreadable manifest: {exc}"
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or not files:
        return "the manifest lists no files (written by an older version)"
    for name, entry in files.items():
        path = target / name
        try:
            size = path.stat().st_size
        except OSError:
            return f"{name} is missing"
        if not isinstance(entry, dict) or size != entry.get("size"):
            return f"{name} has {size} bytes, the manifest says {entry.get('size') if isinstance(entry, dict) else '?'}"
        if file_sha256(path, memo_dir) != entry.get("sha256"):
            return f"{name} does not match its sha256 (corrupted)"
    return None


def _discard(target: Path) -> None:
    """Move a bad entry out of the way at once (a rename), then delete it."""
    trash = target.with_name(f".tmp-bad-{target.name}-{uuid.uuid4().hex[:8]}")
    try:
        os.rename(target, trash)
    except OSError:
        trash = target
    shutil.rmtree(trash, ignore_errors=True)


def _remove_stale_tmp(root: Path) -> None:
    now = time.time()
    for entry in root.glob(".tmp-*"):
        try:
            if now - entry.stat().st_mtime > _STALE_TMP_SECONDS:
                shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink()
        except OSError:
            pass


def convert_gguf(gguf: Path, out_dir: Path, progress: ProgressCallback) -> None:
    """Dequantise ``gguf`` with transformers and save a plain float32 checkpoint.

    transformers refuses ``save_pretrained`` on a GGUF-loaded model, so the weights
    are handed to a model freshly built from the same config first (built on the
    meta device and given the loaded tensors, so nothing is initialised or copied).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    directory, name = str(gguf.parent), gguf.name
    progress(f"converting {name}: reading the tokenizer", 0.0)
    try:
        tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=name)
        size = gguf.stat().st_size // 2**20
        progress(f"converting {name}: dequantising {size} MB of weights (most of the conversion's time)", 0.2)
        loaded = AutoModelForCausalLM.from_pretrained(directory, gguf_file=name, dtype=torch.float32)
    except Exception as exc:
        raise ModelLoadError(f"{str(gguf)!r} could not be read as a GGUF model: {type(exc).__name__}: {exc}") from exc
    progress(f"converting {name}: saving the checkpoint", 0.8)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with torch.device("meta"):  # no random init: the weights are assigned right after
        fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    fresh.load_state_dict(loaded.state_dict(), strict=True, assign=True)
    fresh.tie_weights()
    fresh.generation_config = loaded.generation_config
    del loaded
    out_dir.mkdir(parents=True)
    fresh.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    progress(f"converting {name}: done", 1.0)


def cast_checkpoint(source: Path, out_dir: Path, dtype: Any, progress: ProgressCallback) -> None:
    """Save the float32 checkpoint ``source`` again in ``dtype`` (its other files copied)."""
    from transformers import AutoModelForCausalLM

    progress(f"writing a {_narrow_dtype_name(dtype)} copy of the converted checkpoint", None)
    model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype)
    out_dir.mkdir(parents=True)
    model.save_pretrained(out_dir)
    del model
    for path in source.iterdir():  # tokenizer, chat template: what save_pretrained did not write
        if path.is_file() and path.name != MANIFEST and not (out_dir / path.name).exists():
            shutil.copy2(path, out_dir / path.name)


# --- loading --------------------------------------------------------------------------


def load_model_and_tokenizer(
    spec: ModelSpec, options: LoadOptions, progress: ProgressCallback
) -> tuple[CausalLM, TextTokenizer, ProcessorMixin | None]:
    """Load ``spec`` (see the module docstring); errors are :class:`ModelLoadError`.

    A vision-language checkpoint (its config has a ``vision_config``) is loaded with
    ``AutoModelForImageTextToText`` and returns its processor (which sizes the
    images) as the third item; a text model returns ``None`` there."""
    source = resolve_source(spec)
    if source.kind == "hub" and source.gguf_file:
        source = ResolvedSource(kind="gguf", location=_hub_download(spec, source.location, source.gguf_file))
    location = source.location
    if source.kind == "gguf":
        # bnb quantizes what it loads: keep it on the float32 entry, as before.
        narrow = options.dtype if options.quantization in ("none", "int8") else None
        location = str(ensure_gguf_checkpoint(Path(source.location), options.cache_dir, progress, narrow))
    use_native, why = choose_model_code(spec, source.kind, location, options)
    log.info("model '%s': %s model code (%s)", spec.name, "FlexServ's" if use_native else "transformers'", why)
    progress(f"loading weights from {location}", None)
    model: CausalLM
    if use_native:
        model, tokenizer, processor = _load_native(spec, location, options)
    else:
        model, tokenizer, processor = _from_pretrained(spec, location, options, hub=source.kind == "hub")
    if options.quantization == "int8":
        from flexserv_transformers.int8 import quantize_linears

        quantize_linears(model, options.dtype)
        # The parameters int8 did not replace (embeddings, norms) may be views into the
        # checkpoint's memory map, which then stays mapped with every float weight read
        # from it (~0.4 GB of RSS for the embedded model in float32): copy them out.
        for parameter in model.parameters():
            parameter.data = parameter.data.clone()
        model.eval()
    return model, tokenizer, processor


def choose_model_code(spec: ModelSpec, kind: str, location: str, options: LoadOptions) -> tuple[bool, str]:
    """Whether FlexServ's own forward runs the model, and why (for the log).

    ``--transformers-model-code flexserv`` on a model it cannot run exactly is a
    :class:`ModelLoadError`; ``auto`` falls back to transformers."""
    if options.model_code == "transformers":
        return False, "--transformers-model-code transformers"
    from flexserv_transformers.native.config import read_config, unsupported_reason

    reason: str | None
    if options.engine != "paged":
        reason = f"the {options.engine} engine runs transformers' models"
    elif kind == "hub":
        reason = "a Hub id (FlexServ's forward loads a local directory or GGUF file)"
    elif options.quantization.startswith("bnb-"):
        reason = "bitsandbytes quantization"
    elif options.trust_remote_code:
        reason = "--transformers-trust-remote-code"
    elif options.model_code == "auto" and getattr(options.device, "type", "cpu") != "cpu":
        # Measured and parity-tested on CPUs only; no GPU has run it yet (benchmarks/gpu_check.sh will).
        reason = f"auto runs FlexServ's forward on the CPU only until it is measured on {options.device.type}"
    else:
        reason = unsupported_reason(read_config(location))
    if reason is None:
        return True, "a plain Llama checkpoint in the paged engine"
    if options.model_code == "flexserv":
        raise ModelLoadError(
            f"Model '{spec.name}': --transformers-model-code flexserv cannot run it: {reason}."
            " Use --transformers-model-code auto or transformers."
        )
    return False, reason


def _load_native(
    spec: ModelSpec, location: str, options: LoadOptions
) -> tuple[FlexServLlama, TextTokenizer, ProcessorMixin | None]:
    from flexserv_transformers.native.loading import load_llama, load_tokenizer

    try:
        tokenizer = load_tokenizer(location)
        model = load_llama(location, dtype=options.dtype, device=options.device)
    except ModelLoadError as exc:
        raise ModelLoadError(f"Model '{spec.name}': {exc}") from exc
    except Exception as exc:
        raise ModelLoadError(
            f"Model '{spec.name}': FlexServ's Llama forward could not load {location!r}: {type(exc).__name__}: {exc}"
        ) from exc
    return model, tokenizer, None


def _hub_download(spec: ModelSpec, repo: str, filename: str) -> str:
    from huggingface_hub import hf_hub_download

    try:
        return hf_hub_download(repo, filename, revision=spec.revision)
    except Exception as exc:
        raise ModelLoadError(_hub_message(spec, repo, exc)) from exc


def _hub_message(spec: ModelSpec, repo: str, exc: BaseException) -> str:
    from huggingface_hub import is_offline_mode

    if is_offline_mode():
        return (
            f"Model '{spec.name}': {repo!r} is not in the local Hugging Face cache and the Hub is offline (HF_HUB_OFFLINE=1). "
            "Download it while online (hf download ...) or configure a local directory or .gguf file."
        )
    return f"Model '{spec.name}': could not load {repo!r} from the Hugging Face Hub (is the id right, and is it reachable?): {type(exc).__name__}: {exc}"


def is_vision_language(location: str, options: LoadOptions, revision: dict[str, Any]) -> bool:
    """Whether the checkpoint at ``location`` is a vision-language model (its config
    has a ``vision_config``); a config that cannot be read is left to the load."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(location, trust_remote_code=options.trust_remote_code, **revision)
    except Exception:
        return False
    return getattr(config, "vision_config", None) is not None


def _from_pretrained(
    spec: ModelSpec, location: str, options: LoadOptions, *, hub: bool
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, ProcessorMixin | None]:
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoProcessor, AutoTokenizer

    # The revision pins a Hub id only; a local directory or converted GGUF has none.
    revision: dict[str, Any] = {"revision": spec.revision} if hub and spec.revision else {}
    kwargs: dict[str, Any] = {"dtype": options.dtype, "trust_remote_code": options.trust_remote_code, **revision}
    if options.attn_implementation:
        kwargs["attn_implementation"] = options.attn_implementation
    if options.quantization.startswith("bnb-"):
        kwargs["quantization_config"] = _bnb_config(options)
        kwargs["device_map"] = str(options.device)
    elif options.device.type != "cpu":
        kwargs["device_map"] = str(options.device)
    vision = is_vision_language(location, options, revision)
    processor: ProcessorMixin | None = None
    try:
        if vision:
            processor = AutoProcessor.from_pretrained(location, trust_remote_code=options.trust_remote_code, **revision)
            tokenizer = getattr(processor, "tokenizer", None)
            if tokenizer is None or getattr(processor, "image_processor", None) is None:
                raise ModelLoadError(
                    f"Model '{spec.name}': {location!r} is a vision-language model, but its processor has no"
                    " tokenizer or no image processor."
                )
            model = AutoModelForImageTextToText.from_pretrained(location, **kwargs)
            _check_positions(spec, model)
        else:
            tokenizer = AutoTokenizer.from_pretrained(location, trust_remote_code=options.trust_remote_code, **revision)
            model = AutoModelForCausalLM.from_pretrained(location, **kwargs)
    except ModelLoadError:
        raise
    except Exception as exc:
        if hub and isinstance(exc, OSError):
            raise ModelLoadError(_hub_message(spec, location, exc)) from exc
        raise ModelLoadError(
            f"Model '{spec.name}': transformers could not load {location!r} as a"
            f" {'vision-language model' if vision else 'causal LM'}: {type(exc).__name__}: {exc}"
        ) from exc
    model.eval()
    return model, tokenizer, processor


def _check_positions(spec: ModelSpec, model: PreTrainedModel) -> None:
    """Refuse multimodal rotary positions (Qwen2-VL style): the engines feed 1-D positions."""
    text = model.config.get_text_config()
    for attr in ("rope_scaling", "rope_parameters"):
        rope = getattr(text, attr, None)
        if isinstance(rope, dict) and "mrope_section" in rope:
            raise ModelLoadError(
                f"Model '{spec.name}': {type(model).__name__} uses multimodal rotary positions (mrope), which"
                " FlexServ's engines do not compute; LLaVA-style vision-language models are supported."
            )


def _bnb_config(options: LoadOptions) -> Any:
    from transformers import BitsAndBytesConfig

    if options.device.type != "cuda":
        raise ModelLoadError(
            f"--transformers-quantization {options.quantization} needs a CUDA GPU (bitsandbytes); the device is {options.device.type}."
        )
    if options.quantization == "bnb-4bit":
        return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=options.dtype)
    return BitsAndBytesConfig(load_in_8bit=True)


def eos_token_ids(model: CausalLM, tokenizer: TextTokenizer) -> frozenset[int]:
    """End-of-sequence ids from the generation config and the tokenizer together."""
    ids: set[int] = set()
    configured = getattr(model.generation_config, "eos_token_id", None)
    if isinstance(configured, int):
        ids.add(configured)
    elif configured:
        ids.update(int(i) for i in configured)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return frozenset(ids)


def image_token_id(model: CausalLM, processor: ProcessorMixin) -> int:
    """The id of the token each image placeholder expands into."""
    for attr in ("image_token_id", "image_token_index"):
        value = getattr(model.config, attr, None)
        if isinstance(value, int):
            return value
    value = getattr(processor, "image_token_id", None)
    if isinstance(value, int):
        return value
    token = getattr(processor, "image_token", None)
    tokenizer = getattr(processor, "tokenizer", None)
    if isinstance(token, str) and tokenizer is not None:
        return int(tokenizer.convert_tokens_to_ids(token))
    raise ModelLoadError(f"cannot tell the image token of {type(model).__name__} (no config.image_token_id)")


def context_length(model: CausalLM) -> int:
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    for attr in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, attr, None)
        if isinstance(value, int) and value > 0:
            return value
    return 2048


def embedding_rows(embeddings: torch.nn.Module) -> int:
    """Rows of an embedding module's weight (its vocabulary size)."""
    import torch

    weight = embeddings.weight
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f"{type(embeddings).__name__}.weight is not a tensor")
    return int(weight.shape[0])


def parameter_dtype(model: CausalLM) -> torch.dtype:
    return next(model.parameters()).dtype
