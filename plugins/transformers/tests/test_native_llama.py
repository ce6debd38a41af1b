"""FlexServ's own Llama forward (``flexserv_transformers.native``): through the real
engine runner, bit-identical logits to transformers' ``LlamaForCausalLM`` unfused, and
fused (the 16-bit default) logits within rounding of them with the same greedy picks;
greedy output equal to ``model.generate``, its loader and tokenizer, and how
``--transformers-model-code`` chooses it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from flexserv_transformers.native.config import unsupported_reason
from flexserv_transformers.settings import TransformersSettings, check_settings
from flexserv_transformers.testing import StepSequence

from flexserv_core import ModelKind, ModelLoadError, ModelSpec, UsageError

# --- choosing it (no model loaded) ----------------------------------------------------

PLAIN = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_act": "silu"}


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"model_type": "mistral"}, "model_type"),
        ({"architectures": ["LlamaForSequenceClassification"]}, "architecture"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"attention_bias": True}, "biases"),
        ({"mlp_bias": True}, "biases"),
        ({"rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5}}, "llama3"),
        ({"rope_scaling": {"type": "linear", "factor": 2.0}}, "linear"),
        ({"quantization_config": {"quant_method": "bitsandbytes"}}, "quantized"),
        ({"auto_map": {"AutoModelForCausalLM": "x.Y"}}, "own model code"),
    ],
)
def test_unsupported_checkpoints_say_why(change: dict[str, Any], why: str) -> None:
    assert unsupported_reason(PLAIN) is None
    assert unsupported_reason({**PLAIN, "rope_parameters": {"rope_type": "default", "rope_theta": 1e5}}) is None
    reason = unsupported_reason({**PLAIN, **change})
    assert reason is not None and why in reason


def test_auto_keeps_transformers_code_off_the_cpu_until_measured_there(tmp_path: Path) -> None:
    import torch
    from flexserv_transformers.loading import LoadOptions, choose_model_code

    (tmp_path / "config.json").write_text(json.dumps(PLAIN))
    spec = ModelSpec(name="plain", source=str(tmp_path), kind=ModelKind.TEXT)

    def choose(device: str, code: str) -> tuple[bool, str]:
        options = LoadOptions(device=torch.device(device), dtype=torch.bfloat16, cache_dir=tmp_path, model_code=code)
        return choose_model_code(spec, "dir", str(tmp_path), options)

    assert choose("cpu", "auto")[0]
    native, why = choose("cuda", "auto")
    assert not native and "CPU only" in why and "cuda" in why
    assert choose("cuda", "flexserv")[0]  # asked for: it runs there


def test_flexserv_model_code_needs_the_paged_engine() -> None:
    check_settings(TransformersSettings(transformers_model_code="flexserv"))
    with pytest.raises(UsageError, match="paged engine"):
        check_settings(TransformersSettings(transformers_model_code="flexserv", transformers_engine="simple"))


# --- parity through the real runner ---------------------------------------------------


def _run_steps(model: Any, dtype: Any, prompts: list[list[int]], feed: list[list[int]] | None = None) -> list[Any]:
    """Logits of every step of a fixed plan: two prefills in one step (one split in
    two chunks), a third prompt prefilled in chunks while the others decode.

    Each step's greedy picks are appended to the sequences; ``feed`` (the picks of
    another run, see :func:`_greedy_picks`) appends those instead, so two models that
    round a near-tie apart still see the same tokens."""
    import torch
    from flexserv_transformers.engine.kv_cache import PagedKVCache
    from flexserv_transformers.engine.runner import ModelRunner, kv_geometry

    layers, kv_heads, head_dim = kv_geometry(model)
    cache = PagedKVCache(
        num_layers=layers, num_blocks=48, block_size=4, kv_heads=kv_heads, head_dim=head_dim, dtype=dtype, device="cpu"
    )
    runner = ModelRunner(model, cache)
    a, b, c = (StepSequence(list(p), list(range(i * 16, i * 16 + 16))) for i, p in enumerate(prompts))
    plans = [
        [(a, len(a.tokens)), (b, 5)],
        [(b, len(b.tokens) - 5)],
        [(a, 1), (b, 1), (c, 6)],
        [(a, 1), (b, 1), (c, len(c.tokens) - 6)],
        [(a, 1), (b, 1), (c, 1)],
        [(a, 1), (c, 1)],
    ]
    out = []
    for step, plan in enumerate(plans):
        logits, owners = runner.forward(plan)
        out.append(logits.clone())
        for seq, n in plan:
            seq.num_computed += n
        picks = feed[step] if feed is not None else torch.argmax(logits, dim=-1).tolist()
        for row, index in enumerate(owners):
            plan[index][0].tokens.append(int(picks[row]))
    return out


def _greedy_picks(steps: list[Any]) -> list[list[int]]:
    import torch

    return [torch.argmax(logits, dim=-1).tolist() for logits in steps]


def _assert_within_rounding(expected: list[Any], got: list[Any], dtype_name: str) -> None:
    """Fused logits against transformers' (fed the same tokens): within a few units in
    the last place of the logits' dtype, and the same greedy pick wherever the
    reference's best two logits are not a tie."""
    import torch
    from flexserv_transformers.testing import tie_tolerance

    assert [t.shape for t in got] == [t.shape for t in expected]
    for step, (want, have) in enumerate(zip(expected, got, strict=True)):
        want, have = want.float(), have.float()
        scale = float(want.abs().max())
        diff = float((have - want).abs().max())
        assert diff <= 8 * tie_tolerance(scale, dtype_name), f"step {step}: max |diff| {diff} (logits up to {scale})"
        for row in range(want.shape[0]):
            top2 = torch.topk(want[row], 2)
            gap = float(top2.values[0] - top2.values[1])
            if gap > 2 * tie_tolerance(float(top2.values[0]), dtype_name):
                assert int(torch.argmax(have[row])) == int(top2.indices[0]), f"step {step} row {row}"


def _untied_copy(path: Path, target: Path) -> Path:
    """``path``'s tiny Llama with an lm_head of its own (not tied to the embedding)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.config.tie_word_embeddings = False
    untied = type(model)(model.config)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["lm_head.weight"] = torch.randn_like(
        state["model.embed_tokens.weight"], generator=torch.Generator().manual_seed(3)
    )
    untied.load_state_dict(state)
    untied.generation_config = model.generation_config
    untied.save_pretrained(target)
    AutoTokenizer.from_pretrained(path).save_pretrained(target)
    return target


@pytest.mark.slow  # builds and loads tiny random Llamas
@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_unfused_logits_bit_identical_to_transformers(
    tiny_dir: Path, tmp_path: Path, dtype_name: str, tied: bool
) -> None:
    import torch
    from flexserv_transformers.native.llama import LlamaForCausalLM
    from flexserv_transformers.native.loading import load_llama
    from transformers import AutoModelForCausalLM

    path = tiny_dir if tied else _untied_copy(tiny_dir, tmp_path / "untied")
    dtype = getattr(torch, dtype_name)
    reference = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()
    native = load_llama(path, dtype=dtype, device=torch.device("cpu"), fuse=False)
    assert isinstance(native, LlamaForCausalLM)
    assert (native.lm_head.weight is native.model.embed_tokens.weight) == tied
    assert not native.model.layers[0].self_attn.fused
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 250, (n,), generator=g).tolist() for n in (13, 7, 9)]
    expected = _run_steps(reference, dtype, prompts)
    got = _run_steps(native, dtype, prompts)
    assert [t.shape for t in got] == [t.shape for t in expected]
    for step, (want, have) in enumerate(zip(expected, got, strict=True)):
        assert have.dtype == dtype
        assert torch.equal(have, want), f"step {step}: max |diff| {(have.float() - want.float()).abs().max()}"


@pytest.mark.slow  # builds and loads tiny random Llamas
@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_fused_bfloat16_logits_within_rounding_of_transformers(tiny_dir: Path, tmp_path: Path, tied: bool) -> None:
    """bfloat16 fuses by default; the wider matmuls may round differently on another
    CPU's kernels, so the check is rounding-sized, not bitwise."""
    import torch
    from flexserv_transformers.native.loading import load_llama
    from transformers import AutoModelForCausalLM

    path = tiny_dir if tied else _untied_copy(tiny_dir, tmp_path / "untied")
    reference = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).eval()
    native = load_llama(path, dtype=torch.bfloat16, device=torch.device("cpu"))
    assert native.model.layers[0].self_attn.fused and native.model.layers[0].mlp.fused
    float32 = load_llama(path, dtype=torch.float32, device=torch.device("cpu"))
    assert not float32.model.layers[0].self_attn.fused  # float32 stays unfused: exact
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 250, (n,), generator=g).tolist() for n in (13, 7, 9)]
    expected = _run_steps(reference, torch.bfloat16, prompts)
    got = _run_steps(native, torch.bfloat16, prompts, feed=_greedy_picks(expected))
    assert all(t.dtype == torch.bfloat16 for t in got)
    _assert_within_rounding(expected, got, "bfloat16")


@pytest.mark.slow  # loads the embedded SmolLM2-135M three times
def test_embedded_model_in_bfloat16_unfused_bit_identical_fused_within_rounding(flexserv_test_cache: Path) -> None:
    import torch
    from flexserv_transformers.backend import embedded_gguf
    from flexserv_transformers.loading import ensure_gguf_checkpoint
    from flexserv_transformers.native.loading import load_llama
    from flexserv_transformers.testing import SMOLLM2_MISSING
    from transformers import AutoModelForCausalLM

    gguf = embedded_gguf()
    if gguf is None:
        pytest.fail(SMOLLM2_MISSING)
    directory = ensure_gguf_checkpoint(gguf, flexserv_test_cache, lambda *_: None, torch.bfloat16)
    reference = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.bfloat16).eval()
    unfused = load_llama(directory, dtype=torch.bfloat16, device=torch.device("cpu"), fuse=False)
    g = torch.Generator().manual_seed(7)
    prompts = [torch.randint(0, 49152, (n,), generator=g).tolist() for n in (40, 11, 23)]
    expected = _run_steps(reference, torch.bfloat16, prompts)
    for want, have in zip(expected, _run_steps(unfused, torch.bfloat16, prompts), strict=True):
        assert torch.equal(have, want)
    del unfused
    fused = load_llama(directory, dtype=torch.bfloat16, device=torch.device("cpu"))
    _assert_within_rounding(
        expected, _run_steps(fused, torch.bfloat16, prompts, feed=_greedy_picks(expected)), "bfloat16"
    )


@pytest.mark.slow
def test_int8_quantized_native_model_matches_quantized_transformers(tiny_dir: Path) -> None:
    """``quantize_linears`` finds every projection in both (fused ones in FlexServ's:
    one scale per output row, so the same rows), and the logits stay within rounding."""
    import torch
    from flexserv_transformers.int8 import Int8Linear, quantize_linears
    from flexserv_transformers.native.loading import load_llama
    from transformers import AutoModelForCausalLM

    reference = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.bfloat16).eval()
    native = load_llama(tiny_dir, dtype=torch.bfloat16, device=torch.device("cpu"))
    assert quantize_linears(reference) == 2 * 7 + 1  # q, k, v, o, gate, up, down per layer, and the head
    assert quantize_linears(native) == 2 * 4 + 1  # bf16: qkv, o, gate_up, down per layer, and the head
    assert isinstance(native.lm_head, Int8Linear)
    prompts = [[5, 17, 42, 99, 7, 8, 30, 12, 4], [9, 8, 7, 6, 5, 4, 3], [1, 2, 3, 4, 5, 6, 7, 8]]
    expected = _run_steps(reference, torch.bfloat16, prompts)
    _assert_within_rounding(
        expected, _run_steps(native, torch.bfloat16, prompts, feed=_greedy_picks(expected)), "bfloat16"
    )


@pytest.mark.slow
def test_sharded_checkpoint_loads_the_same_weights(tiny_dir: Path, tmp_path: Path) -> None:
    import torch
    from flexserv_transformers.native.loading import load_llama
    from transformers import AutoModelForCausalLM

    sharded = tmp_path / "sharded"
    AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32).save_pretrained(sharded, max_shard_size="100KB")
    index = json.loads((sharded / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1 and not (sharded / "model.safetensors").exists()
    (sharded / "config.json").write_text((tiny_dir / "config.json").read_text())
    one = load_llama(tiny_dir, dtype=torch.float32, device=torch.device("cpu")).state_dict()
    many = load_llama(sharded, dtype=torch.float32, device=torch.device("cpu")).state_dict()
    assert one.keys() == many.keys() and all(torch.equal(one[k], many[k]) for k in one)


@pytest.mark.slow
def test_missing_weights_are_a_load_error(tiny_dir: Path, tmp_path: Path) -> None:
    import torch
    from flexserv_transformers.native.loading import load_llama
    from safetensors.torch import load_file, save_file

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text((tiny_dir / "config.json").read_text())
    state = load_file(tiny_dir / "model.safetensors")
    del state["model.layers.1.mlp.up_proj.weight"]
    save_file(state, broken / "model.safetensors")
    with pytest.raises(ModelLoadError, match=r"missing: \['model.layers.1.mlp.up_proj.weight'\]"):
        load_llama(broken, dtype=torch.float32, device=torch.device("cpu"))


# --- through the backend and the engine -----------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
async def test_engine_greedy_equals_generate(
    tiny_spec: ModelSpec, tiny_dir: Path, flexserv_test_cache: Path, load_model: Any, collect: Any, dtype_name: str
) -> None:
    """The default (auto) picks FlexServ's forward for the paged engine, and its greedy
    tokens are ``generate``'s on transformers' model with the same weights."""
    import torch
    from flexserv_transformers.native.llama import LlamaForCausalLM
    from flexserv_transformers.testing import tie_tolerance
    from transformers import AutoModelForCausalLM

    dtype = getattr(torch, dtype_name)
    model = load_model(tiny_spec, flexserv_test_cache, dtype=dtype_name)
    reference = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=dtype).eval()
    try:
        assert isinstance(model.engine_model.model, LlamaForCausalLM)
        assert model.engine_model.eos_token_ids == frozenset({reference.generation_config.eos_token_id})
        assert model.limits.context_length == 64 and model.limits.vocab_size == reference.config.vocab_size
        for text in ("hello there", "The quick brown fox", "Paris is the capital of"):
            ids = model.render_chat([{"role": "user", "content": text}], {})
            got = [d.token_id for d in await collect(model, ids, max_tokens=12, temperature=0)]
            with torch.inference_mode():
                out = reference.generate(
                    torch.tensor([ids]),
                    do_sample=False,
                    max_new_tokens=len(got),
                    pad_token_id=min(model.eos_token_ids),
                    output_logits=True,
                    return_dict_in_generate=True,
                )
            expected = out.sequences[0, len(ids) :].tolist()
            if got != expected:  # only a tie at the first flip (generate's cached SDPA rounds differently)
                i = next(k for k, (x, y) in enumerate(zip(expected, got, strict=False)) if x != y)
                logits = out.logits[i][0].float()
                gap = float(logits[expected[i]] - logits[got[i]])
                assert gap <= tie_tolerance(float(logits[expected[i]]), dtype_name), (expected, got)
    finally:
        model.unload()


@pytest.mark.slow
def test_model_code_choice_and_its_errors(
    tiny_spec: ModelSpec, flexserv_test_cache: Path, load_model: Any, caplog: Any
) -> None:
    from flexserv_transformers.native.llama import LlamaForCausalLM

    caplog.set_level("INFO", logger="flexserv_transformers.loading")
    simple = load_model(
        tiny_spec, flexserv_test_cache, dtype="float32", transformers_engine="simple", transformers_model_code="auto"
    )
    try:
        assert not isinstance(simple.engine_model.model, LlamaForCausalLM)
        assert "transformers' model code (the simple engine runs transformers' models)" in caplog.text
    finally:
        simple.unload()
    forced = load_model(tiny_spec, flexserv_test_cache, dtype="float32", transformers_model_code="transformers")
    try:
        assert not isinstance(forced.engine_model.model, LlamaForCausalLM)
    finally:
        forced.unload()
    native = load_model(tiny_spec, flexserv_test_cache, dtype="float32", transformers_model_code="flexserv")
    try:
        assert isinstance(native.engine_model.model, LlamaForCausalLM)
        assert "FlexServ's model code (a plain Llama checkpoint in the paged engine)" in caplog.text
    finally:
        native.unload()


@pytest.mark.slow
def test_flexserv_model_code_refuses_an_unsupported_checkpoint(
    tiny_dir: Path, tmp_path: Path, flexserv_test_cache: Path, load_model: Any
) -> None:
    import shutil

    other = tmp_path / "llama3-rope"
    shutil.copytree(tiny_dir, other)
    config = json.loads((other / "config.json").read_text())
    config["rope_parameters"] = {
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 32,
    }
    (other / "config.json").write_text(json.dumps(config))
    spec = ModelSpec(name="l3", kind=ModelKind.TEXT, source=str(other))
    with pytest.raises(ModelLoadError, match="model-code flexserv cannot run it: its rotary embedding is 'llama3'"):
        load_model(spec, flexserv_test_cache, dtype="float32", transformers_model_code="flexserv")
    fallback = load_model(spec, flexserv_test_cache, dtype="float32")  # auto: transformers runs it
    try:
        from flexserv_transformers.native.llama import LlamaForCausalLM

        assert not isinstance(fallback.engine_model.model, LlamaForCausalLM)
    finally:
        fallback.unload()


# --- the tokenizer --------------------------------------------------------------------

MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Héllo wörld, 世界 🌍! def main(): return 0"},
    {"role": "assistant", "content": "Hi."},
    {"role": "user", "content": "<|im_start|> is special; 1000 + 24 = ?"},
]


def _assert_same_tokenizer(directory: Path) -> None:
    from flexserv_transformers.native.loading import load_tokenizer
    from transformers import AutoTokenizer

    ours, auto = load_tokenizer(directory), AutoTokenizer.from_pretrained(directory)
    assert ours.all_special_tokens == auto.all_special_tokens
    assert (ours.eos_token_id, ours.bos_token_id, ours.pad_token_id) == (
        auto.eos_token_id,
        auto.bos_token_id,
        auto.pad_token_id,
    )
    assert len(ours) == len(auto)
    for text in ("", "hello", MESSAGES[1]["content"], MESSAGES[3]["content"], "  two  spaces\n\ttab"):
        for special in (True, False):
            assert (
                ours(text, add_special_tokens=special)["input_ids"]
                == auto(text, add_special_tokens=special)["input_ids"]
            )
        ids = auto(text)["input_ids"]
        assert ours.decode(ids, skip_special_tokens=True) == auto.decode(ids, skip_special_tokens=True)
    for flags in ({"add_generation_prompt": True}, {"add_generation_prompt": False}):
        assert ours.apply_chat_template(MESSAGES, tokenize=False, **flags) == auto.apply_chat_template(
            MESSAGES, tokenize=False, **flags
        )
        assert ours.apply_chat_template(MESSAGES, tokenize=True, return_dict=False, **flags) == (
            auto.apply_chat_template(MESSAGES, tokenize=True, return_dict=False, **flags)
        )


@pytest.mark.slow
def test_tokenizer_equals_autotokenizer_on_a_tiny_trained_tokenizer(tiny_dir: Path) -> None:
    _assert_same_tokenizer(tiny_dir)


@pytest.mark.slow
def test_tokenizer_equals_autotokenizer_on_the_embedded_model(flexserv_test_cache: Path) -> None:
    import torch
    from flexserv_transformers.backend import embedded_gguf
    from flexserv_transformers.loading import ensure_gguf_checkpoint
    from flexserv_transformers.testing import SMOLLM2_MISSING

    gguf = embedded_gguf()
    if gguf is None:
        pytest.fail(SMOLLM2_MISSING)
    directory = ensure_gguf_checkpoint(gguf, flexserv_test_cache, lambda *_: None, torch.bfloat16)
    _assert_same_tokenizer(directory)


# --- what the engine imports ----------------------------------------------------------

_PROBE = """
import sys, json, asyncio
from pathlib import Path
from flexserv_transformers.backend import TransformersBackend
from flexserv_transformers.plugin import flexserv_add_settings
from flexserv_core import CoreSettings, ModelKind, ModelSpec, SamplingParams, resolve_settings

settings = resolve_settings([CoreSettings, *flexserv_add_settings()], cli={"cache_dir": sys.argv[2], "dtype": "float32"}, env={})
spec = ModelSpec(name="tiny", kind=ModelKind.TEXT, source=sys.argv[1])
model = TransformersBackend(settings).load(spec, lambda *a: None)

async def main():
    ids = model.render_chat([{"role": "user", "content": "hi"}], {})
    return [d.token_id async for d in model.generate(ids, SamplingParams(max_tokens=4, temperature=0))]

tokens = asyncio.run(main())
model.unload()
heavy = ["scipy", "torch._dynamo", "torch.distributed.tensor", "transformers", "transformers.models.llama.modeling_llama",
         "transformers.modeling_utils", "transformers.models.auto.modeling_auto"]
print(json.dumps({"tokens": tokens, "loaded": [m for m in heavy if m in sys.modules]}))
"""


@pytest.mark.slow  # starts a Python process
def test_a_native_load_and_generation_import_no_modelling_code(tiny_dir: Path, flexserv_test_cache: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, str(tiny_dir), str(flexserv_test_cache)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(report["tokens"]) >= 1
    assert report["loaded"] == []
