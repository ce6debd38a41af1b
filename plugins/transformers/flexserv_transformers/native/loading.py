"""Building :class:`~.llama.LlamaForCausalLM` and its tokenizer from a local
checkpoint directory, without transformers' modelling code or its Auto classes
(importing those costs seconds and ~150 MiB)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from flexserv_core import ModelLoadError
from flexserv_transformers.native.config import LlamaConfig, read_config
from flexserv_transformers.native.llama import GenerationDefaults, LlamaForCausalLM

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)

#: Tokenizer classes that are ``tokenizer.json`` as it is: ``PreTrainedTokenizerFast``
#: loads them exactly as ``AutoTokenizer`` does. Others (a class that rebuilds its
#: pipeline in code) go through ``AutoTokenizer``.
_PLAIN_TOKENIZERS = frozenset({"TokenizersBackend", "PreTrainedTokenizerFast"})
#: Buffers older checkpoints saved that the model recomputes.
_IGNORED_SUFFIXES = (".rotary_emb.inv_freq",)


def load_llama(directory: str | Path, *, dtype: torch.dtype, device: torch.device) -> LlamaForCausalLM:
    """The checkpoint in ``directory`` (``config.json`` and ``model.safetensors`` or a
    sharded ``model.safetensors.index.json``) on ``device`` in ``dtype``, in eval mode."""
    directory = Path(directory)
    config = LlamaConfig.from_dict(read_config(directory))
    with torch.device("meta"):
        model = LlamaForCausalLM(config, _generation_defaults(directory, config))
    state = _read_weights(directory, device)
    if config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    state = {k: v for k, v in state.items() if not k.endswith(_IGNORED_SUFFIXES)}
    expected = {name for name, _ in model.named_parameters()} - (
        {"lm_head.weight"} if config.tie_word_embeddings else set()
    )
    missing, unexpected = sorted(expected - state.keys()), sorted(state.keys() - expected)
    if missing or unexpected:
        raise ModelLoadError(
            f"{str(directory)!r} does not hold a plain Llama's weights (missing: {missing[:5]}, unexpected: {unexpected[:5]})"
        )
    # Cast as transformers casts a checkpoint into the requested dtype (round to nearest).
    state = {k: v if v.dtype == dtype else v.to(dtype) for k, v in state.items()}
    model.load_state_dict(state, strict=False, assign=True)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    model.model.rotary_emb.to(device)  # its float32 buffer was computed on the CPU, as transformers does
    model.requires_grad_(False)
    return model.eval()


def _read_weights(directory: Path, device: torch.device) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    single = directory / "model.safetensors"
    if single.is_file():
        files = [single]
    else:
        index = directory / "model.safetensors.index.json"
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ModelLoadError(
                f"{str(directory)!r} has neither model.safetensors nor a readable model.safetensors.index.json: {exc}"
            ) from exc
        files = [directory / name for name in sorted(set(weight_map.values()))]
    state: dict[str, torch.Tensor] = {}
    for file in files:
        try:
            state.update(load_file(file, device=str(device)))
        except Exception as exc:
            raise ModelLoadError(f"could not read the weights in {str(file)!r}: {type(exc).__name__}: {exc}") from exc
    return state


def _generation_defaults(directory: Path, config: LlamaConfig) -> GenerationDefaults:
    """``generation_config.json``'s token ids; the model config's where it has none
    (what transformers derives when the file is absent)."""
    try:
        raw: Any = json.loads((directory / "generation_config.json").read_text())
    except (OSError, ValueError):
        raw = None
    if not isinstance(raw, dict):
        return GenerationDefaults(config.eos_token_id, config.bos_token_id, config.pad_token_id)
    return GenerationDefaults(
        eos_token_id=raw.get("eos_token_id", config.eos_token_id),
        bos_token_id=raw.get("bos_token_id", config.bos_token_id),
        pad_token_id=raw.get("pad_token_id", config.pad_token_id),
    )


def load_tokenizer(directory: str | Path) -> PreTrainedTokenizerBase:
    """The checkpoint's tokenizer, through ``PreTrainedTokenizerFast`` when that
    loads it exactly (it does not import ``AutoConfig``/``AutoTokenizer`` and what
    they pull in), else ``AutoTokenizer``."""
    directory = Path(directory)
    try:
        tokenizer_class = json.loads((directory / "tokenizer_config.json").read_text()).get("tokenizer_class")
    except (OSError, ValueError, AttributeError):
        tokenizer_class = None
    if tokenizer_class in _PLAIN_TOKENIZERS and (directory / "tokenizer.json").is_file():
        from transformers import PreTrainedTokenizerFast

        fast: PreTrainedTokenizerBase = PreTrainedTokenizerFast.from_pretrained(str(directory))
        return fast
    log.info("tokenizer class %r: loading it with AutoTokenizer", tokenizer_class)
    from transformers import AutoTokenizer

    auto: PreTrainedTokenizerBase = AutoTokenizer.from_pretrained(str(directory))
    return auto
