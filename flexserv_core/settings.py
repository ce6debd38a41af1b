"""Settings: declared as msgspec structs, read from CLI > environment > TOML > defaults.

The core declares :class:`CoreSettings`; plugins declare their own structs through
``flexserv_add_settings``. Every field of every struct is one setting with one
name in all three sources, so ``--oom-monitor-ram-threshold``,
``FLEXSERV_OOM_MONITOR_RAM_THRESHOLD`` and ``oom_monitor_ram_threshold = 95`` in the
config file are the same thing. A field may declare aliases
(``Meta(extra={"aliases": ["oom_ram_threshold"]})``), accepted in all three sources
too (the canonical name wins when both are given).

Field names share one namespace: the core's (and its built-in plugins') are bare,
every other plugin's start with the plugin's name (``-`` becomes ``_``). A plugin
blocked with ``-p no:NAME`` is never imported, so its settings are recognised by
that prefix: found in the config file or the environment they are ignored with one
warning.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import logging
import os
import re
import tomllib
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import msgspec

from flexserv_core.errors import UsageError
from flexserv_core.models.spec import ModelKind, ModelSpec
from flexserv_core.stash import Stash

log = logging.getLogger(__name__)

ENV_PREFIX = "FLEXSERV_"
StructT = TypeVar("StructT", bound=msgspec.Struct)


def _doc(text: str, **extra: Any) -> msgspec.Meta:
    return msgspec.Meta(description=text, extra=extra or None)


class CoreSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Settings of the server itself and of the model registry."""

    host: Annotated[str, _doc("Interface to listen on.", metavar="HOST")] = "127.0.0.1"
    port: Annotated[
        int,
        msgspec.Meta(
            ge=0, le=65535, description="TCP port to listen on (0 picks a free one).", extra={"metavar": "PORT"}
        ),
    ] = 8000
    log_level: Annotated[Literal["critical", "error", "warning", "info", "debug"], _doc("Logging level.")] = "info"
    log_format: Annotated[
        Literal["text", "json"], _doc("Log format: text lines, or one JSON object per line (access log too).")
    ] = "text"
    api_key: Annotated[
        list[str],
        _doc(
            "Require 'Authorization: Bearer KEY' on API routes; repeatable (comma-separated in the environment)."
            " A key given here has every scope.",
            secret=True,
            metavar="KEY",
        ),
    ] = msgspec.field(default_factory=list)
    api_keys_file: Annotated[
        str | None,
        _doc(
            "File of API keys, one 'KEY [SCOPE,...]' a line (scopes: inference, operations, metrics; none = all).",
            metavar="PATH",
        ),
    ] = None
    cors_allow_origins: Annotated[
        list[str],
        _doc("Enable CORS for these origins ('*' for any); repeatable. Empty: no CORS headers.", metavar="ORIGIN"),
    ] = msgspec.field(default_factory=list)
    cors_allow_methods: Annotated[list[str], _doc("Methods CORS allows.", metavar="METHOD")] = msgspec.field(
        default_factory=lambda: ["*"]
    )
    cors_allow_headers: Annotated[list[str], _doc("Request headers CORS allows.", metavar="HEADER")] = msgspec.field(
        default_factory=lambda: ["*"]
    )
    cors_allow_credentials: Annotated[bool, _doc("Let browsers send credentials on CORS requests.")] = False
    ssl_keyfile: Annotated[
        str | None, _doc("Serve HTTPS with this PEM private key (with --ssl-certfile).", metavar="PATH")
    ] = None
    ssl_certfile: Annotated[str | None, _doc("Serve HTTPS with this PEM certificate (chain).", metavar="PATH")] = None
    default_model: Annotated[
        str | None,
        _doc(
            "Text model served when none is configured: a --model name, Hub id, directory or GGUF file.",
            metavar="MODEL",
        ),
    ] = None
    default_embedding_model: Annotated[
        str | None, _doc("Default embedding model (name or source).", metavar="MODEL")
    ] = None
    default_transcription_model: Annotated[
        str | None, _doc("Default transcription model (name or source).", metavar="MODEL")
    ] = None
    model: Annotated[
        list[str],
        _doc(
            "Configure a model: [KIND:]NAME=SOURCE, KIND one of text (default), embedding, transcription or a"
            " plugin's kind. Repeatable; [[models]] tables in the config file configure them in full.",
            metavar="NAME=SOURCE",
        ),
    ] = msgspec.field(default_factory=list)
    model_alias: Annotated[
        list[str],
        _doc(
            "Another name for a served model: ALIAS=NAME (e.g. whisper-1=whisper-tiny.en), NAME a configured,"
            " default or embedded model. Repeatable; listed by /v1/models.",
            metavar="ALIAS=NAME",
        ),
    ] = msgspec.field(default_factory=list)
    force_model: Annotated[
        str | None, _doc("Serve this text model whatever the request's 'model' says.", metavar="MODEL")
    ] = None
    allow_hub_models: Annotated[bool, _doc("Let requests name Hub model ids that are not configured.")] = False
    model_timeout: Annotated[
        float, msgspec.Meta(ge=0, description="Unload a model idle this many seconds (0 keeps it forever).")
    ] = 86_400.0
    load_timeout: Annotated[
        float,
        msgspec.Meta(
            ge=0,
            description="Seconds a model load (conversion included) may take before it fails with 503 (0: no limit).",
        ),
    ] = 1800.0
    block_on_unexpected_fields: Annotated[
        bool, _doc("Reject requests with unknown fields (400) instead of dropping them.")
    ] = False
    cache_dir: Annotated[
        str | None, _doc("Where FlexServ caches converted models (default: ~/.cache/flexserv).", metavar="PATH")
    ] = None
    preload: Annotated[
        list[str],
        _doc(
            "Load these models at start-up, in the background (model names, or 'all' for every configured and"
            " default model); /v1/flexserv/health answers 503 until they are ready. Repeatable.",
            metavar="MODEL",
        ),
    ] = msgspec.field(default_factory=list)
    queue_timeout: Annotated[
        float,
        msgspec.Meta(
            ge=0,
            description="Seconds a request may wait in a backend's queue before it starts generating; then 503"
            " (0 waits forever).",
        ),
    ] = 120.0
    first_token_timeout: Annotated[
        float,
        msgspec.Meta(
            ge=0,
            description="Seconds from a request's model being ready to its first token; then 504 (0: no limit).",
        ),
    ] = 300.0
    request_timeout: Annotated[
        float,
        msgspec.Meta(
            ge=0,
            description="Seconds a generation may run in all, from its model being ready; then 504, or an error"
            " event in a stream (0: no limit).",
        ),
    ] = 1800.0
    shutdown_timeout: Annotated[
        float, msgspec.Meta(ge=0, description="Seconds in-flight requests get to finish on shutdown.")
    ] = 10.0
    max_request_bytes: Annotated[
        int, msgspec.Meta(ge=1024, description="Largest JSON request body in bytes; a larger one gets 413.")
    ] = 10 * 2**20
    max_json_depth: Annotated[
        int,
        msgspec.Meta(ge=4, description="Deepest nesting of arrays and objects a JSON request body may have (400)."),
    ] = 32
    max_messages: Annotated[int, msgspec.Meta(ge=1, description="Most messages one chat request may carry (400).")] = (
        2048
    )
    max_content_parts: Annotated[
        int, msgspec.Meta(ge=1, description="Most content parts one chat message may have (400).")
    ] = 256
    max_stop_strings: Annotated[
        int, msgspec.Meta(ge=1, description="Most stop strings one request may set (400); OpenAI allows 4.")
    ] = 4
    max_stop_chars: Annotated[int, msgspec.Meta(ge=1, description="Longest stop string, in characters (400).")] = 1000
    max_prompt_chars: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            description="Most prompt characters one text request may send (messages or prompts together), checked"
            " before tokenising (400).",
        ),
    ] = 1_000_000
    max_request_tokens: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            description="Most completion tokens one text request may ask for: max_tokens x n (x prompts). A request"
            " that sets max_tokens beyond it gets 400; one that does not has its default budget cut to fit.",
        ),
    ] = 65_536
    max_header_bytes: Annotated[
        int,
        msgspec.Meta(
            ge=1024,
            description="Largest request head (request line and headers) in bytes; a larger one gets 431 and the"
            " connection is closed, before the key check.",
        ),
    ] = 64 * 2**10
    max_headers: Annotated[
        int, msgspec.Meta(ge=1, description="Most headers one request may carry (431, before the key check).")
    ] = 100
    header_timeout: Annotated[
        float,
        msgspec.Meta(
            ge=0,
            description="Seconds a connection may take to send a request's headers, from its opening or the end of"
            " the previous response; then it is closed (408). 0: no limit.",
        ),
    ] = 20.0
    body_timeout: Annotated[
        float,
        msgspec.Meta(
            ge=0,
            description="Seconds a request's body may take to arrive after its headers; then the connection is"
            " closed. Raise it for large uploads over slow links. 0: no limit.",
        ),
    ] = 120.0
    max_connections: Annotated[
        int,
        msgspec.Meta(
            ge=1, description="Most open client connections; a connection beyond them is answered 503 and closed."
        ),
    ] = 512
    max_error_chars: Annotated[
        int,
        msgspec.Meta(
            ge=80, description="Longest error message a response carries; longer ones (quoting request input) are cut."
        ),
    ] = 1024


class ModelTable(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One ``[[models]]`` table of the config file; becomes a :class:`ModelSpec`."""

    name: str
    source: str
    kind: str = ModelKind.TEXT
    backend: str | None = None
    options: dict[str, Any] = msgspec.field(default_factory=dict)
    revision: str | None = None
    aliases: list[str] = msgspec.field(default_factory=list)

    def to_spec(self) -> ModelSpec:
        return ModelSpec(
            name=self.name,
            kind=self.kind,
            source=self.source,
            backend=self.backend,
            options=self.options,
            revision=self.revision,
            aliases=tuple(self.aliases),
            origin="config",
        )


class SettingField(msgspec.Struct, frozen=True):
    """One setting as the CLI, environment and config file see it."""

    owner: type[msgspec.Struct]
    name: str
    type: Any
    default: Any
    description: str
    secret: bool
    cli_only: bool
    flag: str
    aliases: tuple[str, ...] = ()
    metavar: str | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """The canonical name, then the aliases: each is a config-file key."""
        return (self.name, *self.aliases)

    @property
    def flags(self) -> list[str]:
        return [self.flag, *("--" + a.replace("_", "-") for a in self.aliases)]

    @property
    def env_var(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def env_vars(self) -> list[str]:
        return [ENV_PREFIX + n.upper() for n in self.names]

    @property
    def is_bool(self) -> bool:
        return _strip_optional(self.type) is bool

    @property
    def is_list(self) -> bool:
        return typing.get_origin(_strip_optional(self.type)) is list

    @property
    def choices(self) -> tuple[Any, ...] | None:
        """The values of a ``Literal`` type, else ``None``."""
        tp = _strip_optional(self.type)
        return typing.get_args(tp) if typing.get_origin(tp) is Literal else None


def _strip_optional(tp: Any) -> Any:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) in (typing.Union, types.UnionType) and len(args) == 1:
        return args[0]
    return tp


@functools.cache
def _struct_info(struct: type[msgspec.Struct]) -> msgspec.inspect.StructType:
    # msgspec's inspection walks every annotation each call: ~0.3 ms a struct, paid for
    # every plugin's settings each time an app is built (tests build hundreds)
    info = msgspec.inspect.type_info(struct)
    assert isinstance(info, msgspec.inspect.StructType)
    return info


def describe_fields(struct: type[msgspec.Struct]) -> list[SettingField]:
    info = _struct_info(struct)
    hints, annotated = _type_hints(struct)
    fields = []
    for f in info.fields:
        meta = _field_meta(annotated[f.name])
        extra = (meta.extra or {}) if meta else {}
        default = f.default if f.default is not msgspec.NODEFAULT else None
        if f.default_factory is not msgspec.NODEFAULT:
            default = f.default_factory()
        aliases = extra.get("aliases") or ()
        if isinstance(aliases, str) or not all(isinstance(a, str) and a.isidentifier() for a in aliases):
            raise TypeError(f"{struct.__name__}.{f.name}: 'aliases' must be a list of setting names")
        fields.append(
            SettingField(
                owner=struct,
                name=f.name,
                type=hints[f.name],
                default=default,
                description=(meta.description if meta and meta.description else ""),
                secret=bool(extra.get("secret")),
                cli_only=bool(extra.get("cli_only")),
                flag=extra.get("flag") or "--" + f.name.replace("_", "-"),
                aliases=tuple(aliases),
                metavar=extra.get("metavar"),
            )
        )
    return fields


@functools.cache
def _type_hints(struct: type[msgspec.Struct]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The struct's field types without and with ``Annotated`` metadata.

    Evaluated once per struct: ``flexserv run`` describes every settings struct
    dozens of times, and evaluating the annotations (strings, under ``from
    __future__ import annotations``) was most of that start-up cost.
    """
    return typing.get_type_hints(struct, include_extras=False), typing.get_type_hints(struct, include_extras=True)


def _field_meta(hint: Any) -> msgspec.Meta | None:
    for arg in getattr(hint, "__metadata__", ()):
        if isinstance(arg, msgspec.Meta):
            return arg
    return None


class Settings:
    """All validated settings, one struct instance per declaring struct class.

    ``models`` are the models the config file's ``[[models]]`` tables configure
    (the catalog merges them with ``--model``); kinds are checked by the catalog,
    which knows the backends' kinds.
    """

    def __init__(
        self,
        values: Mapping[type[msgspec.Struct], msgspec.Struct],
        fields: list[SettingField],
        origins: Mapping[str, str],
        models: Iterable[ModelSpec] = (),
        *,
        ignored: Iterable[tuple[str, str]] = (),
    ) -> None:
        self._values = dict(values)
        self.fields = fields
        self.origins = dict(origins)
        self.models = list(models)
        #: ``(key, source)`` of blocked plugins' settings found and ignored.
        self.ignored = list(ignored)
        #: Per-app state for plugins, there before the server is: what a hook that
        #: gets only the settings makes (e.g. a metrics collector) and the plugin's
        #: routes use later (``server.settings.state``).
        self.state = Stash()

    @property
    def core(self) -> CoreSettings:
        return self.get(CoreSettings)

    def get(self, struct: type[StructT]) -> StructT:
        try:
            return self._values[struct]  # type: ignore[return-value]
        except KeyError:
            raise KeyError(f"settings {struct.__name__} were not declared by any loaded plugin") from None

    def replace(self, struct: type[StructT], **changes: Any) -> None:
        """Change values (for ``flexserv_configure`` implementations and tests)."""
        self._values[struct] = msgspec.structs.replace(self.get(struct), **changes)

    def summary(self) -> dict[str, Any]:
        """Every setting's value, secrets masked; for ``/v1/flexserv/info``."""
        out: dict[str, Any] = {}
        for f in self.fields:
            value = getattr(self._values[f.owner], f.name)
            out[f.name] = "***" if (f.secret and value) else msgspec.to_builtins(value)
        return out

    @classmethod
    def defaults(cls, structs: Iterable[type[msgspec.Struct]] = ()) -> Settings:
        return resolve_settings([CoreSettings, *structs], cli={}, env={}, config_file=None)


#: Metavars guessed from a setting's name when it declares none (``extra={"metavar": ...}``).
_METAVAR_SUFFIXES = (
    (("_seconds", "_timeout", "_interval"), "SECONDS"),
    (("_ms",), "MS"),
    (("_bytes",), "BYTES"),
    (("_dir", "_path", "_file"), "PATH"),
)


def metavar_of(f: SettingField) -> str:
    """What the value is, for ``--help``: the declared metavar, a ``{a,b}`` choice,
    a unit guessed from the name, else ``N``, ``NUMBER`` or ``TEXT``."""
    if f.metavar:
        return f.metavar
    if f.choices:
        return "{" + ",".join(str(c) for c in f.choices) + "}"
    for suffixes, metavar in _METAVAR_SUFFIXES:
        if f.name.endswith(suffixes):
            return metavar
    tp = _strip_optional(f.type)
    if f.is_list:
        tp = (typing.get_args(tp) or (str,))[0]
    return {int: "N", float: "NUMBER"}.get(tp, "TEXT")


def _default_text(f: SettingField) -> str:
    if f.secret or f.default is None or f.default == [] or f.default == {}:
        return ""
    if f.is_bool:
        return f" (default: {'on' if f.default else 'off'})"
    if isinstance(f.default, float) and f.default.is_integer():
        return f" (default: {int(f.default)})"
    if isinstance(f.default, list):
        return f" (default: {','.join(map(str, f.default))})"
    return f" (default: {f.default})"


def help_text(f: SettingField) -> str:
    """A setting's ``--help`` line: description, default, and where else it can be set."""
    where = f" [env {', '.join(f.env_vars)}]" if not f.cli_only else " [command line only]"
    return (f.description + _default_text(f)).replace("%", "%%") + where


def add_arguments(
    parser: argparse.ArgumentParser,
    structs: Iterable[type[msgspec.Struct]],
    titles: Mapping[type[msgspec.Struct], str] | None = None,
) -> None:
    """Add one flag per setting (plus its aliases); values are left as given
    (validated later). Structs with the same title (by default the struct's name)
    share one argument group, in the order the titles first appear."""
    titles = titles or {}
    groups: dict[str, argparse._ArgumentGroup] = {}
    for struct in structs:
        title = titles.get(struct) or struct.__name__
        if title not in groups:
            groups[title] = parser.add_argument_group(title)
        group = groups[title]
        for f in describe_fields(struct):
            if f.is_bool:
                group.add_argument(
                    *f.flags,
                    dest=f.name,
                    action=argparse.BooleanOptionalAction,
                    default=argparse.SUPPRESS,
                    help=help_text(f),
                )
            else:
                group.add_argument(
                    *f.flags,
                    dest=f.name,
                    action="append" if f.is_list else "store",
                    default=argparse.SUPPRESS,
                    help=help_text(f),
                    metavar=metavar_of(f),
                )


MODELS_KEY = "models"


def read_config_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The config file's settings by name (``[[models]]`` tables under ``"models"``)."""
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise UsageError(f"config file not found: {path}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"config file {path} is not valid TOML: {exc}") from None
    except OSError as exc:  # a directory, no permission
        raise UsageError(f"config file {path} cannot be read: {exc.strerror}") from None
    table = data.get("flexserv", data)
    return {str(k).replace("-", "_"): v for k, v in table.items()}


def setting_prefix(plugin: str) -> str:
    """The prefix of a plugin's setting names: ``oom-monitor`` -> ``oom_monitor``."""
    return plugin.replace("-", "_").replace(".", "_")


def _owned_by(name: str, plugin: str) -> bool:
    prefix = setting_prefix(plugin)
    return name == prefix or name.startswith(prefix + "_")


def resolve_settings(
    structs: Iterable[type[msgspec.Struct]],
    *,
    cli: Mapping[str, Any],
    env: Mapping[str, str] | None = None,
    config_file: str | os.PathLike[str] | None = None,
    blocked: Iterable[str] = (),
) -> Settings:
    """Merge the sources (CLI > environment > config file > defaults) and validate.

    ``blocked`` names plugins blocked with ``-p no:NAME``: config keys and
    environment variables carrying their prefix are ignored with one warning.
    Raises :class:`UsageError` naming the setting when a value is invalid.
    """
    env = os.environ if env is None else env
    structs = list(dict.fromkeys(structs))
    config = read_config_file(config_file) if config_file else {}
    models = decode_model_tables(config.pop(MODELS_KEY, []), config_file)
    fields = [f for s in structs for f in describe_fields(s)]
    known = {n for f in fields for n in f.names}
    ignored = _blocked_settings(blocked, set(config) - known, env, known)
    unknown = sorted(set(config) - known - {key for key, _ in ignored})
    if unknown:
        raise UsageError(f"unknown setting(s) in config file {config_file}: {', '.join(unknown)}")
    if ignored:
        listed = ", ".join(f"{key} ({where})" for key, where in ignored)
        log.warning("ignoring settings of blocked plugin(s) %s: %s", ", ".join(sorted(set(blocked))), listed)
    for var, meant in _misspelt_env({k: v for k, v in env.items() if (k, "environment") not in ignored}, fields):
        log.warning("ignoring environment variable %s: no setting has that name (did you mean %s?)", var, meant)

    values: dict[type[msgspec.Struct], msgspec.Struct] = {}
    origins: dict[str, str] = {}
    given_as: dict[str, str] = {}
    for struct in structs:
        raw: dict[str, Any] = {}
        for f in (f for f in fields if f.owner is struct):
            env_var = next((v for v in f.env_vars if v in env), None)
            key = next((k for k in f.names if k in config), None)
            cli_key = next((k for k in f.names if k in cli), None)
            if cli_key is not None:
                raw[f.name], origins[f.name] = cli[cli_key], "cli"
            elif not f.cli_only and env_var is not None:
                raw[f.name], origins[f.name], given_as[f.name] = _from_env(f, env[env_var]), "env", env_var
            elif not f.cli_only and key is not None:
                raw[f.name], origins[f.name] = config[key], "config"
        for f in (f for f in fields if f.owner is struct and f.is_list):
            if isinstance(raw.get(f.name), str):  # one value where a list is expected: api_key = "KEY"
                raw[f.name] = [raw[f.name]]
        try:
            values[struct] = msgspec.convert(raw, struct, strict=False)
        except msgspec.ValidationError as exc:
            raise UsageError(_explain(exc, fields, origins, given_as)) from None
    return Settings(values, fields, origins, models, ignored=ignored)


def _misspelt_env(env: Mapping[str, str], fields: Iterable[SettingField]) -> list[tuple[str, str]]:
    """``FLEXSERV_`` variables that name no setting but nearly name one, with that one's
    variable. Only near misses: other ``FLEXSERV_`` variables (``FLEXSERV_PLUGINS``, a
    plugin's own) are not settings and are left alone."""
    names = [var for f in fields for var in f.env_vars]
    unknown = sorted(var for var in env if var.startswith(ENV_PREFIX) and var not in names)
    near = ((var, difflib.get_close_matches(var, names, n=1, cutoff=0.9)) for var in unknown)
    return [(var, close[0]) for var, close in near if close]


def _blocked_settings(
    blocked: Iterable[str], config_keys: Iterable[str], env: Mapping[str, str], known: set[str]
) -> list[tuple[str, str]]:
    """``(key, source)`` of every config key and environment variable that belongs
    to a blocked plugin by its prefix (and to no loaded one)."""
    plugins = list(blocked)
    found = [(k, "config file") for k in sorted(config_keys) if any(_owned_by(k, p) for p in plugins)]
    for var in sorted(env):
        name = var[len(ENV_PREFIX) :].lower()
        if var.startswith(ENV_PREFIX) and name not in known and any(_owned_by(name, p) for p in plugins):
            found.append((var, "environment"))
    return found


def decode_model_tables(tables: Any, config_file: str | os.PathLike[str] | None) -> list[ModelSpec]:
    """``[[models]]`` tables to specs; a bad table is a :class:`UsageError` naming its index."""
    if not isinstance(tables, list):
        raise UsageError(f"config file {config_file}: 'models' must be an array of tables ([[models]])")
    specs = []
    for index, table in enumerate(tables):
        where = f"config file {config_file}, [[models]] table models[{index}]"
        if not isinstance(table, dict):
            raise UsageError(f"{where}: expected a table, got {type(table).__name__}")
        unknown = sorted(set(table) - set(ModelTable.__struct_fields__))
        if unknown:
            allowed = ", ".join(ModelTable.__struct_fields__)
            raise UsageError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; allowed keys: {allowed}")
        try:
            specs.append(msgspec.convert(table, ModelTable).to_spec())
        except msgspec.ValidationError as exc:
            raise UsageError(f"{where}: {exc}") from None
    return specs


def _from_env(f: SettingField, value: str) -> Any:
    if f.is_list:
        return [v.strip() for v in value.split(",") if v.strip()]
    return value


def _explain(
    exc: msgspec.ValidationError, fields: list[SettingField], origins: Mapping[str, str], given_as: Mapping[str, str]
) -> str:
    match = re.search(r"at `\$\.(\w+)", str(exc))
    if not match:
        return f"invalid settings: {exc}"
    name = match.group(1)
    f = next((f for f in fields if f.name == name), None)
    reason = str(exc).split(" - at ")[0]
    if f is None:
        return f"invalid setting '{name}': {reason}"
    env_var = given_as.get(name, f.env_var)
    where = {"cli": f.flag, "env": env_var, "config": "config file"}.get(origins.get(name, ""), f.flag)
    return f"invalid value for setting '{name}' ({where}): {reason}"


def default_cache_dir(settings: Settings) -> Path:
    configured = settings.core.cache_dir
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "flexserv"
