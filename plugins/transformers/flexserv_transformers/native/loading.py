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
    from flexserv_transformers.text_tokenizer import TextTokenizer

log = logging.getLogger(__name__)

#: Tokenizer classes that are ``tokenizer.json`` as it is: :class:`FastTokenizer` loads
#: them as ``AutoTokenizer`` does. Others (a class that rebuilds its pipeline in code)
#: go through ``AutoTokenizer``.
_PLAIN_TOKENIZERS = frozenset({"TokenizersBackend", "PreTrainedTokenizerFast"})
#: Buffers older checkpoints saved that the model recomputes.
_IGNORED_SUFFIXES = (".rotary_emb.inv_freq",)


def load_llama(
    directory: str | Path, *, dtype: torch.dtype, device: torch.device, fuse: bool | None = None
) -> LlamaForCausalLM:
    """The checkpoint in ``directory`` (``config.json`` and ``model.safetensors`` or a
    sharded ``model.safetensors.index.json``) on ``device`` in ``dtype``, in eval mode.

    ``fuse``: one matmul for q/k/v and one for gate/up; ``None`` fuses in 16-bit dtypes.
    Unfused, the forward runs transformers' operations on the same tensors, hence its
    logits bit for bit; fused, the wider matmuls may round differently (float32 did,
    ~1e-6; bfloat16 did not on an AVX512-BF16 CPU, other kernels may)."""
    directory = Path(directory)
    config = LlamaConfig.from_dict(read_config(directory))
    # Fused projections speed a batch-1 decode step up ~13% on the embedded model.
    if fuse is None:
        fuse = dtype in (torch.bfloat16, torch.float16)
    with torch.device("meta"):
        model = LlamaForCausalLM(config, _generation_defaults(directory, config), fused=fuse)
    state = _read_weights(directory, device)
    if config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    state = {k: v for k, v in state.items() if not k.endswith(_IGNORED_SUFFIXES)}
    expected = set(checkpoint_names(config))
    missing, unexpected = sorted(expected - state.keys()), sorted(state.keys() - expected)
    if missing or unexpected:
        raise ModelLoadError(
            f"{str(directory)!r} does not hold a plain Llama's weights (missing: {missing[:5]}, unexpected: {unexpected[:5]})"
        )
    fused = _fuse(state, config.num_hidden_layers) if fuse else set()
    # Cast as transformers casts a checkpoint into the requested dtype (round to nearest).
    # Once fused, on the CPU the weights that are neither cast nor fused are copied too,
    # so no tensor keeps the file's mapping alive: its pages read by the fusion would
    # otherwise stay resident next to the fused copies (~130 MiB on the embedded model).
    # Unfused weights stay mapped as transformers maps them: a float32 GEMM's rounding
    # changed with a copy (another alignment), which broke bit-identity.
    copy = fuse and device.type == "cpu"
    state = {
        k: v.to(dtype) if v.dtype != dtype else v.clone() if copy and k not in fused else v for k, v in state.items()
    }
    model.load_state_dict(state, strict=False, assign=True)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    model.model.rotary_emb.to(device)  # its float32 buffer was computed on the CPU, as transformers does
    model.requires_grad_(False)
    return model.eval()


def checkpoint_names(config: LlamaConfig) -> list[str]:
    """The weights a plain Llama checkpoint holds (transformers' names)."""
    names = ["model.embed_tokens.weight", "model.norm.weight"]
    if not config.tie_word_embeddings:
        names.append("lm_head.weight")
    for i in range(config.num_hidden_layers):
        prefix = f"model.layers.{i}."
        names += [prefix + f"self_attn.{p}_proj.weight" for p in "qkvo"]
        names += [prefix + f"mlp.{p}_proj.weight" for p in ("gate", "up", "down")]
        names += [prefix + "input_layernorm.weight", prefix + "post_attention_layernorm.weight"]
    return names


def _fuse(state: dict[str, torch.Tensor], layers: int) -> set[str]:
    """Replace each layer's q/k/v and gate/up weights in ``state`` by their
    concatenation (rows after rows), the fused projections of :mod:`.llama`; return
    the fused names (new tensors, not views of the file)."""
    fused: set[str] = set()
    for i in range(layers):
        attn, mlp = f"model.layers.{i}.self_attn.", f"model.layers.{i}.mlp."
        state[attn + "qkv_proj.weight"] = torch.cat([state.pop(attn + f"{p}_proj.weight") for p in "qkv"])
        state[mlp + "gate_up_proj.weight"] = torch.cat([state.pop(mlp + f"{p}_proj.weight") for p in ("gate", "up")])
        fused.update((attn + "qkv_proj.weight", mlp + "gate_up_proj.weight"))
    return fused


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


def load_tokenizer(directory: str | Path) -> TextTokenizer:
    """The checkpoint's tokenizer: a :class:`~flexserv_transformers.fast_tokenizer.FastTokenizer`
    (no transformers import, ~0.5 s less at a cold start) when its class is the plain
    ``tokenizer.json`` pipeline, else ``AutoTokenizer``'s."""
    directory = Path(directory)
    try:
        tokenizer_class = json.loads((directory / "tokenizer_config.json").read_text()).get("tokenizer_class")
    except (OSError, ValueError, AttributeError):
        tokenizer_class = None
    if tokenizer_class in _PLAIN_TOKENIZERS and (directory / "tokenizer.json").is_file():
        from flexserv_transformers.fast_tokenizer import FastTokenizer

        return FastTokenizer.from_directory(directory)
    log.info("tokenizer class %r: loading it with AutoTokenizer", tokenizer_class)
    from transformers import AutoTokenizer

    auto: TextTokenizer = AutoTokenizer.from_pretrained(str(directory))
    return auto
