"""The llguidance compiler, driven the way the core and a backend drive it: a
vocabulary from token bytes (what llama.cpp gives), one matcher per sequence, a
mask before each token, ``advance`` after it."""

from __future__ import annotations

import json

import numpy as np
import pytest
from flexserv_constraints import ConstraintVocabulary, LLGuidanceCompiler, TokenMatcher, fill_blocked_masks

from flexserv_core import Constraint, InvalidRequest

EOS = 256


def json_schema_constraint(schema: dict[str, object], param: str) -> Constraint:
    return Constraint(kind="json_schema", spec=json.dumps(schema), param=param)


def byte_vocabulary() -> ConstraintVocabulary:
    """One token per byte, then an end-of-sequence token."""
    tokens = [bytes([i]) for i in range(256)] + [b"</s>"]
    return ConstraintVocabulary.from_tokens(tokens, encode=list, eos_token_ids=[EOS], special_token_ids=[EOS])


def allowed_bytes(matcher: TokenMatcher) -> set[int]:
    return {i for i in np.flatnonzero(~matcher.blocked()) if i < 256}


def walk(matcher: TokenMatcher, choose: list[bytes], limit: int = 400) -> str:
    """Generate by taking, at each step, the first allowed byte of ``choose``'s
    preference order (the smallest otherwise), until EOS is the only way on."""
    out = bytearray()
    for _ in range(limit):
        row = matcher.blocked()
        if not row[EOS] and matcher.accepting:
            return out.decode()
        pick = next((c[0] for c in choose if not row[c[0]]), None)
        if pick is None:
            pick = int(np.flatnonzero(~row[:256])[0])
        matcher.advance(pick)
        out.append(pick)
    raise AssertionError(f"no end within {limit} tokens: {out!r}")


def test_a_schema_keeps_its_key_order() -> None:
    """A schema that asks for reasoning before the answer gets it in that order
    (sorted keys would put "answer" first and lose the reasoning)."""
    schema = {
        "type": "object",
        "properties": {"reasoning": {"type": "string"}, "answer": {"type": "integer"}},
        "required": ["reasoning", "answer"],
        "additionalProperties": False,
    }
    compiled = LLGuidanceCompiler().compile(json_schema_constraint(schema, "response_format"), byte_vocabulary())
    matcher = compiled.matcher()
    for byte in b'{"':
        matcher.advance(byte)
    assert allowed_bytes(matcher) == {ord("r")}
    text = walk(compiled.matcher(), [b'"', b"}", b"1"])
    value = json.loads(text)
    assert list(value) == ["reasoning", "answer"] and isinstance(value["answer"], int)


def test_end_of_sequence_only_where_the_output_is_complete() -> None:
    compiled = LLGuidanceCompiler().compile(Constraint(kind="regex", spec="(ab)+"), byte_vocabulary())
    matcher = compiled.matcher()
    assert matcher.blocked()[EOS]
    matcher.advance(ord("a"))
    assert matcher.blocked()[EOS] and allowed_bytes(matcher) == {ord("b")}
    matcher.advance(ord("b"))
    assert not matcher.blocked()[EOS] and allowed_bytes(matcher) == {ord("a")}


def test_a_batch_fills_only_its_constrained_rows() -> None:
    compiler, vocab = LLGuidanceCompiler(), byte_vocabulary()
    digits = compiler.compile(Constraint(kind="regex", spec="[0-9]+"), vocab).matcher()
    choice = compiler.compile(Constraint(kind="choice", spec=json.dumps(["yes", "no"])), vocab).matcher()
    masks = fill_blocked_masks([digits, None, choice], EOS + 1)
    assert masks is not None and masks.rows == [0, 2]
    assert {i for i in np.flatnonzero(~masks.blocked[0])} == set(range(ord("0"), ord("9") + 1))
    assert {i for i in np.flatnonzero(~masks.blocked[1])} == {ord("y"), ord("n")}
    assert fill_blocked_masks([None, None], EOS + 1) is None


def test_compiled_grammars_are_cached_across_requests() -> None:
    compiler, vocab = LLGuidanceCompiler(), byte_vocabulary()
    constraint = Constraint(kind="json_object")
    first = compiler.compile(constraint, vocab)
    again = compiler.compile(Constraint(kind="json_object"), vocab)  # an equal constraint of another request
    assert again is first and (compiler.hits, compiler.misses) == (1, 1)
    assert first.matcher() is not first.matcher()  # each sequence gets its own
    other = compiler.compile(constraint, byte_vocabulary())  # another model's vocabulary: its own grammar
    assert other is not first and compiler.misses == 2


@pytest.mark.parametrize(
    ("constraint", "param"),
    [
        (Constraint(kind="regex", spec="[a-", param="structured_outputs.regex"), "structured_outputs.regex"),
        (Constraint(kind="json_schema", spec='{"type": "banana"}'), "response_format"),
        (Constraint(kind="grammar", spec="start: nowhere", param="structured_outputs.grammar"), None),
    ],
)
def test_a_constraint_that_cannot_be_enforced_is_a_400_naming_its_parameter(
    constraint: Constraint, param: str | None
) -> None:
    with pytest.raises(InvalidRequest) as info:
        LLGuidanceCompiler().compile(constraint, byte_vocabulary())
    assert info.value.param == (param or constraint.param)
    assert info.value.code == "invalid_grammar"


#: Grammars the library validates but gives up on at their first steps (found by a
#: hostile-input audit: each was served as a 200 "stop" whose text broke the constraint).
GIVE_UP = {
    "too complex to lex": Constraint(kind="regex", spec="(a{1000}){1000}", param="structured_outputs.regex"),
    "too complex to parse": Constraint(
        kind="choice", spec=json.dumps([f"opt{i}" for i in range(5000)]), param="structured_outputs.choice"
    ),
    "a schema that is only itself": json_schema_constraint({"$ref": "#"}, "response_format.json_schema.schema"),
    "a definition that is only itself": json_schema_constraint(
        {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}}, "text.format.schema"
    ),
    "a rule with no finite derivation": Constraint(
        kind="grammar", spec="start: x\nx: x", param="structured_outputs.grammar"
    ),
}


@pytest.mark.parametrize("case", list(GIVE_UP))
def test_a_grammar_the_library_gives_up_on_is_refused_at_compile_time(case: str) -> None:
    constraint = GIVE_UP[case]
    with pytest.raises(InvalidRequest) as info:
        LLGuidanceCompiler().compile(constraint, byte_vocabulary())
    assert (info.value.param, info.value.code) == (constraint.param, "invalid_grammar")
    assert "NoExtensionBias" not in info.value.message and "<state>" not in info.value.message


def test_a_matcher_reports_why_it_gave_up() -> None:
    """What the text session reads when a choice ends: ``error`` is None while the
    grammar holds, the library's reason once a token was refused."""
    matcher = LLGuidanceCompiler().compile(Constraint(kind="regex", spec="ab", param="p"), byte_vocabulary()).matcher()
    assert matcher.error is None
    matcher.advance(ord("a"))
    assert matcher.error is None
    matcher.advance(ord("z"))  # outside the mask: what a backend that ignored it would do
    assert matcher.error


def test_a_vocabulary_needs_its_end_of_sequence_token() -> None:
    with pytest.raises(ValueError, match="end-of-sequence"):
        ConstraintVocabulary.from_tokens([b"a"], encode=list, eos_token_ids=[])


def test_a_schema_the_library_refuses_is_a_400_naming_its_parameter() -> None:
    compiler = LLGuidanceCompiler()
    compiler.check_schema({"type": "object", "properties": {"a": {"type": "string"}}}, "tools[0].function.parameters")
    with pytest.raises(InvalidRequest) as info:
        compiler.check_schema(
            {"type": "object", "properties": {"a": {"type": "banana"}}}, "tools[0].function.parameters"
        )
    assert (info.value.param, info.value.code) == ("tools[0].function.parameters", "invalid_schema")


def test_matchers_of_another_implementation_are_filled_row_by_row() -> None:
    """The core's batch helper needs only the protocol: a backend-neutral matcher
    (here: allow one token) mixed with llguidance's is filled one row at a time."""

    class Only:
        accepting = stopped = False

        def advance(self, token_id: int) -> None:
            pass

        def fill_blocked(self, row: np.ndarray) -> None:
            row[:] = True
            row[7] = False

        def blocked(self) -> np.ndarray:
            row = np.zeros(EOS + 1, dtype=np.bool_)
            self.fill_blocked(row)
            return row

    digits = LLGuidanceCompiler().compile(Constraint(kind="regex", spec="[0-9]"), byte_vocabulary()).matcher()
    assert isinstance(Only(), TokenMatcher) and isinstance(digits, TokenMatcher)
    masks = fill_blocked_masks([Only(), digits], EOS + 1)
    assert masks is not None and masks.rows == [0, 1]
    assert set(np.flatnonzero(~masks.blocked[0])) == {7}
    assert set(np.flatnonzero(~masks.blocked[1])) == set(range(ord("0"), ord("9") + 1))
