"""Constrained decoding and logit_bias in both engines, on a tiny random Llama.

A random model's free output is gibberish, so any valid JSON / regex match it
produces is the grammar's doing."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest
from flexserv_constraints import LLGuidanceCompiler
from flexserv_transformers.testing import build_tiny_llama

from flexserv_core import Constraint, InvalidRequest, ModelKind, ModelSpec, SamplingParams, prepare_params

pytestmark = pytest.mark.slow  # loads a model per engine and decodes a few hundred tokens

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z]{1,8}$"},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "role": {"enum": ["admin", "user"]},
        "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]{1,5}$"}, "maxItems": 3},
    },
    "required": ["name", "age", "role", "tags"],
    "additionalProperties": False,
}
SCHEMA_C = Constraint(kind="json_schema", spec=json.dumps(SCHEMA))
#: The platform's compiler, as a server holds it (``server.constraints``).
COMPILER = LLGuidanceCompiler()


@pytest.fixture(scope="module")
def tiny_long_spec(tmp_path_factory: pytest.TempPathFactory) -> ModelSpec:
    path = build_tiny_llama(tmp_path_factory.mktemp("tiny-long"), max_position_embeddings=256)
    return ModelSpec(name="tiny-long", kind=ModelKind.TEXT, source=str(path))


@pytest.fixture(scope="module", params=["simple", "paged"])
def engine_model(request: pytest.FixtureRequest, tiny_long_spec, tmp_path_factory: pytest.TempPathFactory, load_model):
    # a small KV cache (20 blocks of 8 tokens) makes concurrent paged sequences preempt each other
    extra = {"transformers_kv_cache_blocks": 20, "transformers_kv_block_size": 8} if request.param == "paged" else {}
    model = load_model(
        tiny_long_spec, tmp_path_factory.mktemp("cache"), dtype="float32", transformers_engine=request.param, **extra
    )
    yield model
    model.unload()


def _prompt(model: Any) -> list[int]:
    return model.render_chat([{"role": "user", "content": "describe a person as JSON"}], {})


async def _text(model: Any, prompt: list[int], params: SamplingParams) -> tuple[str, str | None]:
    params = await prepare_params(model, params, constraints=COMPILER)
    parts, finish = [], None
    async for delta in model.generate(prompt, params):
        parts.append(delta.text)
        finish = delta.finish_reason
    return "".join(parts), finish


async def test_json_schema_sampled_outputs_validate(engine_model):
    prompt = _prompt(engine_model)
    params = [SamplingParams(max_tokens=100, temperature=1.0, seed=s, constraint=SCHEMA_C) for s in range(6)]
    results = await asyncio.gather(*(_text(engine_model, prompt, p) for p in params))
    for text, finish in results:
        assert finish == "stop", text  # EOS came only once the document was complete
        value = json.loads(text)
        assert set(value) == {"name", "age", "role", "tags"} and value["role"] in ("admin", "user")
        assert isinstance(value["age"], int) and len(value["tags"]) <= 3


async def test_constrained_and_free_sequences_share_a_batch(engine_model):
    prompt = _prompt(engine_model)
    free = SamplingParams(max_tokens=12, temperature=0)
    alone, _ = await _text(engine_model, prompt, free)
    mixed = await asyncio.gather(
        *(_text(engine_model, prompt, SamplingParams(max_tokens=40, seed=i, constraint=SCHEMA_C)) for i in range(3)),
        _text(engine_model, prompt, free),
    )
    assert mixed[-1][0] == alone  # the neighbours' masks never touch an unconstrained row


async def test_preemption_keeps_grammar_in_step(engine_model):
    if engine_model.engine_name != "paged":
        pytest.skip("the simple engine does not preempt")
    prompt = _prompt(engine_model)
    before = engine_model.engine.stats()["preemptions"]
    params = [SamplingParams(max_tokens=100, seed=s, constraint=SCHEMA_C) for s in range(6)]
    results = await asyncio.gather(*(_text(engine_model, prompt, p) for p in params))
    assert engine_model.engine.stats()["preemptions"] > before
    for text, finish in results:
        if finish == "stop":
            json.loads(text)
        else:  # ran out of tokens: still a valid prefix of the grammar's language
            assert text.startswith("{")


@pytest.mark.parametrize(
    ("constraint", "check"),
    [
        (Constraint(kind="regex", spec=r"[0-9]{3}-[a-c]{2}"), lambda t: re.fullmatch(r"[0-9]{3}-[a-c]{2}", t)),
        (Constraint(kind="choice", spec=json.dumps(["yes", "no", "maybe"])), lambda t: t in ("yes", "no", "maybe")),
        (
            Constraint(kind="grammar", spec='start: "x" ("+" "y")* "=" /[0-9]/'),
            lambda t: re.fullmatch(r"x(\+y)*=\d", t),
        ),
        (Constraint(kind="json_object"), lambda t: isinstance(json.loads(t), dict)),
        (
            Constraint(
                kind="json_schema",
                spec=json.dumps({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}),
                prefix="<tool_call>\n",
                suffix="\n</tool_call>",
                repeat=True,
                separator="\n",
            ),
            lambda t: re.fullmatch(r'(<tool_call>\n\{"a": -?\d+\}\n</tool_call>\n?)+', t),
        ),
    ],
    ids=["regex", "choice", "lark", "json_object", "wrapped-repeat"],
)
async def test_other_constraint_kinds(engine_model, constraint, check):
    params = SamplingParams(max_tokens=60, temperature=1.0, seed=3, constraint=constraint)
    text, finish = await _text(engine_model, _prompt(engine_model), params)
    assert finish == "stop" and check(text), text


@pytest.mark.parametrize(
    ("constraint", "match"),
    [
        (Constraint(kind="json_schema", spec='{"type": "array", "uniqueItems": true}'), "uniqueItems"),
        (Constraint(kind="json_schema", spec='{"type":'), "JSON schema"),
        (Constraint(kind="regex", spec="[a-z", param="structured_outputs.regex"), "regular expression"),
        (Constraint(kind="grammar", spec="start: nowhere"), "nowhere"),
    ],
)
async def test_uncompilable_constraints_are_400(engine_model, constraint, match):
    with pytest.raises(InvalidRequest, match=match) as info:
        await prepare_params(engine_model, SamplingParams(max_tokens=4, constraint=constraint), constraints=COMPILER)
    assert info.value.param == constraint.param


async def test_logit_bias_forbids_and_forces(engine_model):
    prompt = _prompt(engine_model)

    async def ids(**params: Any) -> list[int]:
        return [d.token_id async for d in engine_model.generate(prompt, SamplingParams(**params))]

    first = (await ids(max_tokens=1, temperature=0))[0]
    assert (await ids(max_tokens=1, temperature=0, logit_bias={first: -100}))[0] != first
    target = 300  # an ordinary BPE token of the tiny vocabulary
    assert await ids(max_tokens=5, temperature=1.0, seed=1, logit_bias={target: 100}) == [target] * 5


async def test_logit_bias_outside_vocabulary_is_400(engine_model):
    with pytest.raises(InvalidRequest) as info:
        await engine_model.prepare(SamplingParams(max_tokens=1, logit_bias={10**6: 1.0}))
    assert info.value.param == "logit_bias"


def test_masks_match_llguidance_reference(engine_model) -> None:
    """The NumPy mask path (computed ahead, on another thread in the paged engine)
    blocks exactly what llguidance's own applier blocks, leaves rows without a
    grammar alone, and allows EOS only where the grammar accepts."""
    import llguidance.numpy as lnp
    import numpy as np
    import torch
    from flexserv_constraints import fill_blocked_masks
    from flexserv_transformers.grammar import apply_blocked_masks

    vocabulary = engine_model.constraint_vocabulary

    def state(constraint: Constraint):
        return COMPILER.compile(constraint, vocabulary).matcher()

    vocab = engine_model.limits.vocab_size
    done = state(Constraint(kind="choice", spec=json.dumps(["ab"])))
    for token in COMPILER.tokenizer(vocabulary).tokenize_str("ab"):
        done.advance(token)
    states = [state(SCHEMA_C), None, done, state(Constraint(kind="regex", spec="[0-9]+"))]
    logits = torch.randn(len(states), vocab)
    masks = fill_blocked_masks(states, vocab)
    assert masks is not None and masks.rows == [0, 2, 3]
    out = apply_blocked_masks(logits, states, masks)
    assert torch.equal(out[1], logits[1]) and not torch.equal(out, logits)
    for row in (0, 3):
        assert states[row] is not None
        reference = logits[row : row + 1].numpy().copy()
        bits = lnp.allocate_token_bitmask(1, vocab)
        lnp.fill_next_token_bitmask_par(compiler_executor(), [(states[row].matcher, 0)], bits)
        lnp.apply_token_bitmask_inplace(reference, bits)
        assert np.array_equal(np.isinf(reference[0]), np.isinf(out[row].numpy()))
        assert not any(out[row, e] > -np.inf for e in engine_model.eos_token_ids)  # not accepting yet
    allowed = torch.nonzero(out[2] > float("-inf")).flatten().tolist()
    assert allowed and set(allowed) <= set(engine_model.eos_token_ids)  # accepting: EOS only
    assert torch.equal(apply_blocked_masks(logits, states), out)  # computed here: the same


def compiler_executor() -> Any:
    import llguidance

    return llguidance.LLExecutor()
