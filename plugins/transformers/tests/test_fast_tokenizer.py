"""FastTokenizer (tokenizer.json without transformers) against transformers' PreTrainedTokenizerFast.

The same directory is loaded both ways; encode, decode, chat templates (text and
ids) and the special token ids must agree on the tiny in-process tokenizers and
on the embedded SmolLM2 conversion. Then: which loader ``load_tokenizer`` picks,
the grammar vocabulary built from the serialized tokenizer, threads sharing one
tokenizer, and a real server process whose native path never imports transformers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from flexserv_chat_templates import render_chat_template
from flexserv_transformers.fast_tokenizer import FastTokenizer
from flexserv_transformers.testing import (
    SMOLLM2_MISSING,
    TINY_CHAT_TEMPLATE,
    TINY_TOOLS_CHAT_TEMPLATE,
    train_tiny_tokenizer,
)

from flexserv_core.testing import free_port, stop_process, wait_healthy

TEXTS = [
    "",
    " ",
    "  ",
    "hello",
    "Hello world!",
    " leading space",
    "trailing spaces   ",
    "a\n\nb\tc\r\nd",
    "naïve café, 世界, こんにちは",
    "emoji 🌍🚀 and 👩‍👩‍👧",
    "e\u0301 combining, \ufeffbom, \u200bzero width",
    "<|im_start|>user\nhi<|im_end|>\n",
    "<|endoftext|>",
    "x<|endoftext|>y",
    "<|im_end",
    "see <image> and<|tool|>x",
    "<think>plan</think>answer",
    "don't you're we've I'm it's",
    "Hello , world . Really ? Yes ! It 's they 're we 've I 'm isn 't",
    "1234567890 3.14159 -42",
    "def main():\n    print('hello world')\n    return 0\n",
    "{}[]()<>=+-*/_.,;:!?'\"#@$%^&|~`",
    "The quick brown fox jumps over the lazy dog." * 3,
    "\x00\x01 control",
    "Ω≈ç√∫µ≤≥÷ åß∂ƒ©∆¬…æ",
    "مرحبا بالعالم",
]

CONVERSATIONS: list[list[dict[str, Any]]] = [
    [{"role": "user", "content": "Hi!"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "naïve 世界 🌍"}],
    [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4", "tool_calls": None},
        {"role": "user", "content": "And <|im_end|> 3+3?"},
    ],
    [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": {"city": "Paris"}}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"temp": 21, "sky": "clear"}'},
    ],
]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "weather",
            "description": "Weather of a city — now",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]

#: What transformers' rendering offers a template, used all at once.
FEATURES_TEMPLATE = (
    "{{ bos_token }}{% set ns = namespace(count=0) %}"
    "{% for m in messages %}{% if m['role'] == 'skip' %}{% continue %}{% endif %}"
    "{% set ns.count = ns.count + 1 %}"
    "{% if m.reasoning_content is defined %}[r:{{ m.reasoning_content }}|{{ m.thinking }}]{% endif %}"
    "{% if m.content is defined %}<{{ m['role'] }}>{% generation %}{{ m['content'] }}{% endgeneration %}\n"
    "{% else %}<{{ m['role'] }} no content>\n{% endif %}"
    "{% if m['role'] == 'stop' %}{% break %}{% endif %}"
    "{% endfor %}"
    "count={{ ns.count }} tools={{ tools | tojson(indent=2) }} docs={{ documents | tojson }}\n"
    "{{ dict(a=1, b='é') | tojson(sort_keys=True) }} {{ dict.fromkeys(['x'], 0) | tojson }}\n"
    "{{ strftime_now('%Y') | length }} extra={{ extra | default('none') }} eos={{ eos_token }}"
    "\n    {% if add_generation_prompt %}\n<assistant>{% endif %}"  # lstrip_blocks, trim_blocks
)
RAISING_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'system' %}"
    "{{ raise_exception('System messages are not supported: ' + m['content']) }}"
    "{% endif %}{{ m['content'] }}{% endfor %}"
)


def _save(directory: Path, chat_template: str | None, extra_special: list[str] | None = None) -> Path:
    tokenizer = train_tiny_tokenizer()
    tokenizer.chat_template = chat_template
    if extra_special:
        tokenizer.add_special_tokens({"additional_special_tokens": extra_special})
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def tiny_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _save(tmp_path_factory.mktemp("tiny-tok"), TINY_CHAT_TEMPLATE)


@pytest.fixture(scope="module")
def tools_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _save(tmp_path_factory.mktemp("tiny-tools-tok"), TINY_TOOLS_CHAT_TEMPLATE)


@pytest.fixture(scope="module")
def extra_tokens_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Extra special tokens (a vision model's ``<image>``), one of them not in the vocabulary yet."""
    return _save(tmp_path_factory.mktemp("tiny-extra-tok"), TINY_CHAT_TEMPLATE, ["<image>", "<|tool|>"])


@pytest.fixture(scope="module")
def bos_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A post-processor that puts BOS before the text (Llama style): add_special_tokens matters."""
    from tokenizers import processors

    tokenizer = train_tiny_tokenizer()
    bos = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="<|endoftext|> $A", pair="<|endoftext|> $A $B", special_tokens=[("<|endoftext|>", bos)]
    )
    tokenizer.chat_template = TINY_CHAT_TEMPLATE
    directory = tmp_path_factory.mktemp("tiny-bos-tok")
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def metaspace_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SentencePiece style: a Unigram model with Metaspace, a normalizer, an unknown
    token, and clean_up_tokenization_spaces on (applied to non-BPE models)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.Unigram())
    backend.normalizer = normalizers.NFKC()
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
    backend.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="first")
    trainer = trainers.UnigramTrainer(
        vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"], unk_token="<unk>", show_progress=False
    )
    backend.train_from_iterator([" ".join(TEXTS)] * 8 + ["don't . , ? ! 's 're 've"] * 4, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        clean_up_tokenization_spaces=True,
    )
    tokenizer.chat_template = TINY_CHAT_TEMPLATE
    directory = tmp_path_factory.mktemp("tiny-metaspace-tok")
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def smollm_dir(flexserv_test_cache: Path) -> Path:
    from flexserv_transformers.backend import embedded_gguf
    from flexserv_transformers.loading import ensure_gguf_checkpoint

    gguf = embedded_gguf()
    if gguf is None:
        pytest.fail(SMOLLM2_MISSING)
    return ensure_gguf_checkpoint(gguf, flexserv_test_cache, lambda message, fraction=None: None)


@pytest.fixture(
    scope="module",
    params=[
        "tiny",
        "tiny-tools",
        "tiny-extra",
        "tiny-bos",
        "metaspace",
        pytest.param("smollm", marks=pytest.mark.slow),
    ],
)
def pair(request: pytest.FixtureRequest) -> tuple[FastTokenizer, Any]:
    """The same directory loaded by FastTokenizer and by transformers."""
    from transformers import PreTrainedTokenizerFast

    fixture = {
        "tiny": "tiny_tokenizer_dir",
        "tiny-tools": "tools_tokenizer_dir",
        "tiny-extra": "extra_tokens_dir",
        "tiny-bos": "bos_tokenizer_dir",
        "metaspace": "metaspace_tokenizer_dir",
        "smollm": "smollm_dir",
    }[request.param]
    directory = request.getfixturevalue(fixture)
    return FastTokenizer.from_directory(directory), PreTrainedTokenizerFast.from_pretrained(str(directory))


def _outcome(call: Any, *args: Any, **kwargs: Any) -> Any:
    """The result of ``call(*args, **kwargs)``, or the type and message of what it raised."""
    try:
        return call(*args, **kwargs)
    except Exception as exc:
        return (type(exc).__name__, str(exc))


# -- encode / decode ------------------------------------------------------------------


@pytest.mark.parametrize("add_special_tokens", [True, False])
def test_encode_matches_transformers(pair: tuple[FastTokenizer, Any], add_special_tokens: bool) -> None:
    fast, hf = pair
    for text in TEXTS:
        expected = hf(text, add_special_tokens=add_special_tokens)["input_ids"]
        assert fast(text, add_special_tokens=add_special_tokens)["input_ids"] == expected, text
        assert fast.encode(text, add_special_tokens=add_special_tokens) == expected
    assert fast.tokenize("naïve café") == hf.tokenize("naïve café")


def test_special_token_text_is_one_token(pair: tuple[FastTokenizer, Any]) -> None:
    fast, hf = pair
    eos = fast.special_tokens["eos_token"]
    assert fast(f"a{eos}b", add_special_tokens=False)["input_ids"].count(fast.eos_token_id) == 1
    assert fast.eos_token_id == hf.eos_token_id
    assert fast.convert_tokens_to_ids(eos) == hf.convert_tokens_to_ids(eos)
    assert fast.convert_tokens_to_ids("no-such-token-§") == hf.convert_tokens_to_ids("no-such-token-§")
    assert fast.special_tokens == hf.special_tokens_map
    assert fast.all_special_tokens == hf.all_special_tokens
    assert (fast.bos_token_id, fast.pad_token_id, fast.unk_token_id) == (
        hf.bos_token_id,
        hf.pad_token_id,
        hf.unk_token_id,
    )
    assert len(fast) == len(hf)


def test_a_special_token_only_in_the_vocabulary_becomes_special(tiny_tokenizer_dir: Path, tmp_path: Path) -> None:
    """A configured special token that tokenizer.json has as a plain vocabulary entry:
    transformers registers it as a special added token (matched whole, skipped by
    decode), and so must FastTokenizer."""
    import shutil

    from transformers import PreTrainedTokenizerFast

    directory = tmp_path / "vocab-special"
    shutil.copytree(tiny_tokenizer_dir, directory)
    vocab = json.loads((directory / "tokenizer.json").read_text())["model"]["vocab"]
    token = max((t for t in vocab if t.isalpha() and t.isascii()), key=lambda t: (len(t), t))
    config = json.loads((directory / "tokenizer_config.json").read_text())
    (directory / "tokenizer_config.json").write_text(json.dumps({**config, "mask_token": token}))
    fast, hf = FastTokenizer.from_directory(directory), PreTrainedTokenizerFast.from_pretrained(str(directory))
    text = f"x{token}y {token}"
    ids = hf(text, add_special_tokens=False)["input_ids"]
    assert fast(text, add_special_tokens=False)["input_ids"] == ids
    assert ids.count(vocab[token]) == 2  # matched whole, even inside a word
    for skip in (True, False):
        assert fast.decode(ids, skip_special_tokens=skip) == hf.decode(ids, skip_special_tokens=skip)
    assert token not in fast.decode(ids, skip_special_tokens=True)
    assert fast.special_tokens["mask_token"] == token and fast.all_special_tokens == hf.all_special_tokens


@pytest.mark.parametrize("skip_special_tokens", [True, False])
def test_decode_matches_transformers(pair: tuple[FastTokenizer, Any], skip_special_tokens: bool) -> None:
    fast, hf = pair
    for text in TEXTS:
        ids = hf(text, add_special_tokens=True)["input_ids"]
        assert fast.decode(ids, skip_special_tokens=skip_special_tokens) == hf.decode(
            ids, skip_special_tokens=skip_special_tokens
        ), text
    assert fast.decode([], skip_special_tokens=skip_special_tokens) == ""


def test_decode_of_partial_utf8_tokens_matches(pair: tuple[FastTokenizer, Any]) -> None:
    """Every slice of a multi-byte text's ids: byte tokens that end inside a character
    decode to U+FFFD the same way (what the incremental detokenizer relies on)."""
    fast, hf = pair
    ids = hf("é世🌍ü", add_special_tokens=False)["input_ids"]
    partial = 0
    for i in range(len(ids)):
        for j in range(i + 1, len(ids) + 1):
            got = fast.decode(ids[i:j], skip_special_tokens=True)
            assert got == hf.decode(ids[i:j], skip_special_tokens=True), ids[i:j]
            partial += "\ufffd" in got
    if type(fast.backend_tokenizer.decoder).__name__ == "ByteLevel":
        assert partial > 0  # byte-level vocabularies split these characters


# -- chat templates -------------------------------------------------------------------


@pytest.mark.parametrize("conversation", CONVERSATIONS, ids=["user", "system", "multi-turn", "tool"])
@pytest.mark.parametrize("tools", [None, TOOLS], ids=["no-tools", "tools"])
def test_chat_template_matches_transformers(
    pair: tuple[FastTokenizer, Any], conversation: list[dict[str, Any]], tools: Any
) -> None:
    fast, hf = pair
    for generation_prompt in (True, False):
        for kwargs in ({}, {"enable_thinking": True}, {"enable_thinking": False}):
            common = {"add_generation_prompt": generation_prompt, "tools": tools, **kwargs}
            text = _outcome(fast.apply_chat_template, conversation, tokenize=False, **common)
            assert text == _outcome(hf.apply_chat_template, conversation, tokenize=False, **common)
            ids = _outcome(fast.apply_chat_template, conversation, tokenize=True, return_dict=False, **common)
            assert ids == _outcome(hf.apply_chat_template, conversation, tokenize=True, return_dict=False, **common)


def test_tools_reach_the_tools_template(tools_tokenizer_dir: Path) -> None:
    fast = FastTokenizer.from_directory(tools_tokenizer_dir)
    text = fast.apply_chat_template(CONVERSATIONS[3], tools=TOOLS, add_generation_prompt=True, tokenize=False)
    assert isinstance(text, str)
    assert "Weather of a city — now" in text  # tojson keeps non-ASCII
    assert '<tool_call>\n{"name": "weather", "arguments": {"city": "Paris"}}\n</tool_call>' in text
    assert "<tool_response>\n" in text and text.endswith("<|im_start|>assistant\n")


def test_template_features_match_transformers(tiny_tokenizer_dir: Path, tmp_path: Path) -> None:
    """namespace, loop controls, {% generation %}, tojson options, dict, strftime_now,
    None values dropped, reasoning aliases, documents, special tokens and variables."""
    from transformers import PreTrainedTokenizerFast

    directory = _save(tmp_path / "features", FEATURES_TEMPLATE)
    fast, hf = FastTokenizer.from_directory(directory), PreTrainedTokenizerFast.from_pretrained(str(directory))
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "skip", "content": "hidden"},
        {"role": "assistant", "content": None, "reasoning": "because ü"},
        {"role": "user", "content": "q"},
        {"role": "stop", "content": "end"},
        {"role": "user", "content": "after the break"},
    ]
    documents = [{"title": "Doc", "text": "ß text"}]
    for extra in ({}, {"extra": "yes", "eos_token": "OVERRIDE"}):
        common = {"tools": TOOLS, "documents": documents, "add_generation_prompt": True, **extra}
        text = fast.apply_chat_template(messages, tokenize=False, **common)
        assert text == hf.apply_chat_template(messages, tokenize=False, **common)
        assert fast.apply_chat_template(messages, return_dict=False, **common) == hf.apply_chat_template(
            messages, return_dict=False, **common
        )
    assert isinstance(text, str)
    assert "count=4" in text and "hidden" not in text and "after the break" not in text
    assert "[r:because ü|because ü]<assistant no content>" in text
    assert text.endswith("eos=OVERRIDE\n<assistant>")  # the block's indentation and newline are trimmed
    assert "eos=OVERRIDE" in text and "extra=yes" in text and '\n  {\n    "type": "function"' in text


def test_template_errors_match_transformers(tmp_path: Path) -> None:
    from transformers import PreTrainedTokenizerFast

    directory = _save(tmp_path / "raising", RAISING_TEMPLATE)
    fast, hf = FastTokenizer.from_directory(directory), PreTrainedTokenizerFast.from_pretrained(str(directory))
    # raise_exception and an empty conversation: the same error and message; a message
    # that is not an object: the same error (the API only sends objects).
    cases: list[tuple[Any, bool]] = [([{"role": "system", "content": "no"}], True), ([], True), (["text"], False)]
    for messages, same_message in cases:
        got = _outcome(fast.apply_chat_template, messages, add_generation_prompt=True, return_dict=False)
        assert isinstance(got, tuple), messages
        expected = _outcome(hf.apply_chat_template, messages, add_generation_prompt=True, return_dict=False)
        assert got == expected if same_message else got[0] == expected[0]
    first = _outcome(fast.apply_chat_template, cases[0][0], add_generation_prompt=True)
    assert first == ("TemplateError", "System messages are not supported: no")


def test_sandbox_refuses_what_transformers_refuses(tmp_path: Path) -> None:
    from transformers import PreTrainedTokenizerFast

    escapes = [
        "{{ messages.__class__.__mro__ }}",
        "{% set ns = namespace() %}{% set ns._x = 1 %}{{ ns._x }}",
        "{{ messages.append(1) }}",
    ]
    for i, template in enumerate(escapes):
        directory = _save(tmp_path / f"escape{i}", template)
        fast, hf = FastTokenizer.from_directory(directory), PreTrainedTokenizerFast.from_pretrained(str(directory))
        user = [{"role": "user", "content": "x"}]
        got = _outcome(fast.apply_chat_template, user, tokenize=False)
        expected = _outcome(hf.apply_chat_template, user, tokenize=False)
        assert isinstance(got, tuple) and isinstance(expected, tuple), template
        assert got[0] == expected[0] == "SecurityError"  # the wording is ours


def test_chat_template_files_and_named_templates(tiny_tokenizer_dir: Path, tmp_path: Path) -> None:
    """chat_template.jinja and additional_chat_templates/: the default, ``tool_use`` with tools, a name."""
    from transformers import PreTrainedTokenizerFast

    directory = _save(tmp_path / "named", "default: {{ messages[0]['content'] }}")
    (directory / "additional_chat_templates").mkdir()
    (directory / "additional_chat_templates" / "tool_use.jinja").write_text(
        "tools: {{ tools | length if tools else 0 }}"
    )
    fast, hf = FastTokenizer.from_directory(directory), PreTrainedTokenizerFast.from_pretrained(str(directory))
    assert fast.chat_template == hf.chat_template and isinstance(fast.chat_template, dict)
    user = [{"role": "user", "content": "x"}]
    for kwargs in ({}, {"tools": TOOLS}, {"chat_template": "tool_use"}, {"chat_template": "inline {{ 1 + 1 }}"}):
        assert fast.apply_chat_template(user, tokenize=False, **kwargs) == hf.apply_chat_template(
            user, tokenize=False, **kwargs
        )


def test_template_is_compiled_once_per_model(tiny_tokenizer_dir: Path) -> None:
    fast = FastTokenizer.from_directory(tiny_tokenizer_dir)
    user = [{"role": "user", "content": "x"}]
    fast.apply_chat_template(user, tokenize=False)
    assert isinstance(fast.chat_template, str)
    compiled = fast._templates.get(fast.chat_template)
    fast.apply_chat_template(user, tokenize=False, enable_thinking=True)
    assert fast._templates.get(fast.chat_template) is compiled
    assert (
        render_chat_template(compiled, user, add_generation_prompt=False, special_tokens={})
        == "<|im_start|>user\nx<|im_end|>\n"
    )


def test_threads_share_one_tokenizer(tools_tokenizer_dir: Path) -> None:
    """Eight threads render, encode and decode at once; every result equals the serial one."""
    fast = FastTokenizer.from_directory(tools_tokenizer_dir)
    jobs = [(conversation, tools) for conversation in CONVERSATIONS for tools in (None, TOOLS)]

    def work(conversation: list[dict[str, Any]], tools: Any) -> tuple[Any, ...]:
        ids = fast.apply_chat_template(conversation, tools=tools, add_generation_prompt=True, return_dict=False)
        assert isinstance(ids, list)
        return tuple(ids), fast.decode(ids), tuple(fast.encode(fast.decode(ids), add_special_tokens=False))

    expected = [work(*job) for job in jobs]
    errors: list[str] = []
    start = threading.Barrier(8)

    def hammer() -> None:
        start.wait()
        for _ in range(40):
            for job, want in zip(jobs, expected, strict=True):
                got = work(*job)
                if got != want:
                    errors.append(f"{job[0][0]['content']!r}: {got[1]!r} != {want[1]!r}")

    threads = [threading.Thread(target=hammer) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


# -- which tokenizer loads, and the grammar's vocabulary --------------------------------


def test_load_tokenizer_picks_fast_for_plain_classes_only(tiny_tokenizer_dir: Path, tmp_path: Path) -> None:
    import shutil

    from flexserv_transformers.native.loading import load_tokenizer

    assert isinstance(load_tokenizer(tiny_tokenizer_dir), FastTokenizer)
    other = tmp_path / "gpt2-class"
    shutil.copytree(tiny_tokenizer_dir, other)
    config = json.loads((other / "tokenizer_config.json").read_text())
    (other / "tokenizer_config.json").write_text(json.dumps({**config, "tokenizer_class": "GPT2Tokenizer"}))
    auto = load_tokenizer(other)
    assert not isinstance(auto, FastTokenizer)
    assert type(auto).__module__.startswith("transformers")
    fast = load_tokenizer(tiny_tokenizer_dir)
    assert auto("naïve café")["input_ids"] == fast("naïve café")["input_ids"]


def test_grammar_vocabulary_matches_llguidance_hf(tiny_tokenizer_dir: Path) -> None:
    import llguidance.hf
    from flexserv_constraints import LLGuidanceCompiler
    from flexserv_transformers.grammar import constraint_vocabulary
    from transformers import PreTrainedTokenizerFast

    fast = FastTokenizer.from_directory(tiny_tokenizer_dir)
    hf = PreTrainedTokenizerFast.from_pretrained(str(tiny_tokenizer_dir))
    ours = LLGuidanceCompiler().tokenizer(constraint_vocabulary(fast, len(fast) + 3, [fast.eos_token_id or 0]))
    theirs = llguidance.hf.from_tokenizer(hf, n_vocab=len(hf) + 3, eos_token=[hf.eos_token_id])
    assert (ours.vocab_size, ours.eos_token, ours.eos_tokens) == (
        theirs.vocab_size,
        theirs.eos_token,
        theirs.eos_tokens,
    )
    for text in TEXTS:
        assert ours.tokenize_str(text) == theirs.tokenize_str(text), text
    assert all(ours.decode_str([i]) == theirs.decode_str([i]) for i in range(len(fast)))


# -- the native cold path ---------------------------------------------------------------

_IMPORT_PROBE = """
import atexit, runpy, sys
report_path = sys.argv[1]
def report():
    with open(report_path, "w") as fh:
        fh.write(",".join(sorted(m for m in sys.modules if m == "transformers" or m.startswith("transformers."))))
atexit.register(report)
sys.argv = ["flexserv", *sys.argv[2:]]
runpy.run_module("flexserv_core", run_name="__main__", alter_sys=True)
"""


@pytest.mark.slow
def test_native_server_never_imports_transformers(flexserv_test_cache: Path, tmp_path: Path) -> None:
    """A real ``flexserv run`` with the embedded model (FlexServ's Llama forward) serves a
    chat request and a JSON-schema one; at exit, no transformers module was ever imported."""
    import openai
    from flexserv_transformers.backend import embedded_gguf
    from flexserv_transformers.loading import ensure_gguf_checkpoint
    from flexserv_transformers.settings import resolve_device, resolve_dtype

    # The first conversion of a GGUF goes through transformers (by design): warm the
    # cache here, in the dtype the server will pick, so the test holds when run alone.
    gguf = embedded_gguf()
    assert gguf is not None, SMOLLM2_MISSING
    ensure_gguf_checkpoint(gguf, flexserv_test_cache, lambda *_: None, resolve_dtype("auto", resolve_device("auto")))
    report = tmp_path / "modules.txt"
    port = free_port()
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "FLEXSERV_CACHE_DIR": str(flexserv_test_cache),
        "FLEXSERV_PLUGINS": "transformers,constraints",  # the probe asks for JSON output
        "FLEXSERV_LOG_LEVEL": "warning",
    }
    probe = tmp_path / "probe.py"
    probe.write_text(_IMPORT_PROBE)
    command = [sys.executable, str(probe), str(report), "run", "--host", "127.0.0.1", "--port", str(port)]
    command += ["--transformers-model-code", "auto"]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, timeout=300)
        with openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=300) as sdk:
            started = time.monotonic()
            chat = sdk.chat.completions.create(
                model="SmolLM2-135M-Instruct",
                messages=[{"role": "user", "content": "What is the capital of France? One word."}],
                max_tokens=8,
                temperature=0,
            )
            assert "Paris" in (chat.choices[0].message.content or "")
            schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
            structured = sdk.chat.completions.create(
                model="SmolLM2-135M-Instruct",
                messages=[{"role": "user", "content": "The capital of France, as JSON."}],
                max_tokens=24,
                temperature=0,
                response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": schema}},
            )
            assert "city" in json.loads(structured.choices[0].message.content or "{}")
            assert time.monotonic() - started < 300
    finally:
        stop_process(proc)
    output = proc.stdout.read() if proc.stdout else ""
    assert report.is_file(), output[-2000:]
    assert report.read_text() == "", f"transformers modules imported: {report.read_text()[:500]}"
