"""A checkpoint's ``tokenizer.json`` through the ``tokenizers`` library, without transformers.

:class:`FastTokenizer` is what ``PreTrainedTokenizerFast.from_pretrained`` builds
for a checkpoint whose tokenizer class is the plain ``tokenizer.json`` pipeline,
reduced to what FlexServ calls (:class:`~flexserv_transformers.text_tokenizer.TextTokenizer`):
the special tokens of ``tokenizer_config.json`` (strings or AddedToken objects)
registered as special, the chat template of ``chat_template.jinja`` (or the
config), and ``apply_chat_template`` with transformers' semantics
(``flexserv_chat_templates.render_chat_template``). Importing transformers costs about
half a second of a cold start; FlexServ's own Llama forward needs nothing else
from it.

Thread-safe: nothing changes the Rust tokenizer after construction (transformers
switches its truncation and padding per call).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flexserv_chat_templates import ChatTemplates, render_chat_template, select_chat_template
from tokenizers import AddedToken, Tokenizer

__all__ = ["SPECIAL_TOKEN_NAMES", "FastTokenizer"]

#: transformers' named special tokens, in its order (template variables of the same names).
SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")

#: What transformers' ``clean_up_tokenization`` replaces (off unless the config asks; never for BPE).
_CLEANUP: tuple[tuple[str, str], ...] = (
    (" .", "."),
    (" ?", "?"),
    (" !", "!"),
    (" ,", ","),
    (" ' ", "'"),
    (" n't", "n't"),
    (" 'm", "'m"),
    (" 's", "'s"),
    (" 've", "'ve"),
    (" 're", "'re"),
)


def _token(value: Any) -> AddedToken | None:
    """A special token of the config: a string, or an AddedToken serialized as an object."""
    if isinstance(value, str):
        return AddedToken(value, special=True, normalized=False)
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        flags = {k: bool(value[k]) for k in ("single_word", "lstrip", "rstrip", "normalized") if k in value}
        return AddedToken(value["content"], special=True, **flags)
    return None


def _as_special(token: AddedToken) -> AddedToken:
    return AddedToken(
        token.content,
        single_word=token.single_word,
        lstrip=token.lstrip,
        rstrip=token.rstrip,
        normalized=token.normalized,
        special=True,
    )


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    return data if isinstance(data, dict) else {}


def _chat_template(directory: Path, config: dict[str, Any]) -> str | dict[str, str] | None:
    """``chat_template.jinja`` and ``additional_chat_templates/*.jinja`` (which take
    priority, as in transformers), else the config's ``chat_template``."""
    templates: dict[str, str] = {}
    main = directory / "chat_template.jinja"
    if main.is_file():
        templates["default"] = main.read_text(encoding="utf-8")
    extra = directory / "additional_chat_templates"
    if extra.is_dir():
        for path in sorted(extra.glob("*.jinja")):
            templates[path.name.removesuffix(".jinja")] = path.read_text(encoding="utf-8")
    if templates:
        return templates["default"] if list(templates) == ["default"] else templates
    configured = config.get("chat_template")
    if isinstance(configured, str):
        return configured
    if isinstance(configured, list):
        return {t["name"]: t["template"] for t in configured if isinstance(t, dict)}
    return None


class FastTokenizer:
    """A checkpoint directory's ``tokenizer.json`` with its configuration.

    Attributes:
        special_tokens: the named special tokens as template variables
            (``bos_token``, ``eos_token``, ..., plus model-specific ``*_token`` ones).
        chat_template: the Jinja template (a dict when the checkpoint names several).
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        special_tokens: dict[str, str],
        extra_special_tokens: list[AddedToken] | None = None,
        chat_template: str | dict[str, str] | None = None,
        split_special_tokens: bool = False,
        clean_up_tokenization_spaces: bool = False,
    ) -> None:
        tokenizer.no_truncation()
        tokenizer.no_padding()
        # transformers registers every named special token as a special added token
        # (decode skips it, encode matches it whole), even one the file only has in its vocabulary.
        # A token the file already adds keeps its flags (lstrip, ...), as in transformers.
        added = {t.content: t for t in tokenizer.get_added_tokens_decoder().values()}
        named = [AddedToken(content, special=True, normalized=False) for content in special_tokens.values()]
        tokens = named + list(extra_special_tokens or [])
        tokenizer.add_special_tokens([_as_special(added.get(t.content, t)) for t in tokens])
        tokenizer.encode_special_tokens = split_special_tokens
        self._tokenizer = tokenizer
        self.special_tokens = dict(special_tokens)
        #: Named then extra special tokens, each once (transformers' ``all_special_tokens``).
        self.all_special_tokens = list(
            dict.fromkeys([*special_tokens.values(), *(t.content for t in tokens[len(named) :])])
        )
        self.chat_template = chat_template
        # transformers skips the cleanup for BPE (it would strip real spaces before punctuation).
        self._clean_up = clean_up_tokenization_spaces and type(tokenizer.model).__name__ != "BPE"
        self._templates = ChatTemplates()

    @classmethod
    def from_directory(cls, directory: str | Path) -> FastTokenizer:
        """The tokenizer of a checkpoint directory holding ``tokenizer.json``."""
        directory = Path(directory)
        config = _read_json(directory / "tokenizer_config.json")
        if "added_tokens_decoder" not in config:  # older checkpoints keep them apart
            config = {**config, **_read_json(directory / "special_tokens_map.json")}
        special: dict[str, str] = {}
        extra: list[AddedToken] = []
        for name in SPECIAL_TOKEN_NAMES:
            token = _token(config.get(name))
            if token is not None:
                special[name] = token.content
        # Model-specific named tokens (``image_token``...), as transformers reads them.
        named_extra = config.get("extra_special_tokens")
        if not isinstance(named_extra, dict):
            named_extra = {}
        for name, value in [*config.items(), *named_extra.items()]:
            if name.endswith("_token") and name not in SPECIAL_TOKEN_NAMES and isinstance(value, str | dict):
                token = _token(value)
                if token is not None and (isinstance(value, str) or value.get("__type") == "AddedToken"):
                    special[name] = token.content
        listed = config.get("extra_special_tokens", config.get("additional_special_tokens"))
        if isinstance(listed, list):
            extra = [t for t in map(_token, listed) if t is not None]
        return cls(
            Tokenizer.from_file(str(directory / "tokenizer.json")),
            special_tokens=special,
            extra_special_tokens=extra,
            chat_template=_chat_template(directory, config),
            split_special_tokens=bool(config.get("split_special_tokens", False)),
            clean_up_tokenization_spaces=bool(config.get("clean_up_tokenization_spaces", False)),
        )

    # -- the text model's interface ---------------------------------------------------------

    @property
    def backend_tokenizer(self) -> Tokenizer:
        """The Rust tokenizer (llguidance builds its vocabulary from its serialization)."""
        return self._tokenizer

    @property
    def eos_token(self) -> str | None:
        return self.special_tokens.get("eos_token")

    @property
    def eos_token_id(self) -> int | None:
        return self._special_id("eos_token")

    @property
    def bos_token_id(self) -> int | None:
        return self._special_id("bos_token")

    @property
    def pad_token_id(self) -> int | None:
        return self._special_id("pad_token")

    @property
    def unk_token_id(self) -> int | None:
        token = self.special_tokens.get("unk_token")
        return None if token is None else self._tokenizer.token_to_id(token)

    def _special_id(self, name: str) -> int | None:
        token = self.special_tokens.get(name)
        return None if token is None else self._id(token)

    def __len__(self) -> int:
        return int(self._tokenizer.get_vocab_size(with_added_tokens=True))

    def __call__(self, text: str, *, add_special_tokens: bool = True) -> dict[str, list[int]]:
        ids = self.encode(text, add_special_tokens=add_special_tokens)
        return {"input_ids": ids, "attention_mask": [1] * len(ids)}

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=add_special_tokens).ids)

    def tokenize(self, text: str, add_special_tokens: bool = False) -> list[str]:
        return list(self._tokenizer.encode(text, add_special_tokens=add_special_tokens).tokens)

    def decode(self, token_ids: int | list[int], skip_special_tokens: bool = False) -> str:
        ids = [token_ids] if isinstance(token_ids, int) else list(token_ids)
        text: str = self._tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)
        if self._clean_up:
            for old, new in _CLEANUP:
                text = text.replace(old, new)
        return text

    def _id(self, token: str) -> int | None:
        found = self._tokenizer.token_to_id(token)
        return self.unk_token_id if found is None else int(found)

    def convert_tokens_to_ids(self, tokens: str | list[str]) -> Any:
        """The id of a token (of each token of a list); the unknown token's id when absent."""
        if isinstance(tokens, str):
            return self._id(tokens)
        return [self._id(t) for t in tokens]

    def apply_chat_template(
        self,
        conversation: list[dict[str, Any]],
        *,
        chat_template: str | None = None,
        add_generation_prompt: bool = False,
        tokenize: bool = True,
        return_dict: bool = True,
        tools: list[dict[str, Any]] | None = None,
        documents: list[dict[str, Any]] | None = None,
        **kwargs: Any,
    ) -> str | list[int] | dict[str, list[int]]:
        """``conversation`` rendered by the chat template (``chat_template``: another
        template, or the name of one of the model's), as transformers renders it;
        with ``tokenize``, its ids (no special tokens added around them), as a dict
        unless ``return_dict=False``. ``kwargs`` are template variables."""
        source = select_chat_template(self.chat_template, chat_template, tools)
        text = render_chat_template(
            self._templates.get(source),
            conversation,
            add_generation_prompt=add_generation_prompt,
            special_tokens=self.special_tokens,
            tools=tools,
            documents=documents,
            variables=kwargs,
        )
        if not tokenize:
            return text
        return self(text, add_special_tokens=False) if return_dict else self.encode(text, add_special_tokens=False)
