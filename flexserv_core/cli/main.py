"""``flexserv``: run the server, list or create plugins, and run the commands plugins add.

Parsing happens in two passes: the first reads only the plugin selection
(``-p``) and ``--config``, so that the plugins can be loaded; the second knows
every plugin's settings, which therefore appear in ``flexserv run --help``.
"""

from __future__ import annotations

import argparse
import difflib
import itertools
import json
import logging
import os
import signal
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

from flexserv_core import __version__, hooks
from flexserv_core.commands import CORE_COMMANDS, CommandContext
from flexserv_core.edge.logs import configure_logging
from flexserv_core.errors import PluginCommandError, PluginError, UsageError
from flexserv_core.plugin_manager import FlexServPluginManager, PluginStatus, create_plugin_manager
from flexserv_core.plugin_report import plugin_report
from flexserv_core.settings import Settings, add_arguments

EXIT_USAGE = 2
#: a plugin failed to load or to start, or the server did not start
EXIT_PLUGIN = 3


def _selection_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument(
        "-p",
        dest="plugins",
        action="append",
        default=[],
        metavar="NAME",
        help="Load plugin NAME (entry-point name or dotted module); -p no:NAME blocks it.",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=os.environ.get("FLEXSERV_CONFIG"),
        help="TOML settings file (keys are setting names) [env FLEXSERV_CONFIG].",
    )
    return parser


def settings_groups(pm: FlexServPluginManager) -> tuple[list[type[Any]], dict[type[Any], str]]:
    """Settings structs for ``--help``: the core's built-ins first, then every other
    plugin by name; each group titled by plugin name and distribution."""
    by_plugin = hooks.settings_by_plugin(pm)
    infos = {info.name: info for info in pm.plugin_infos()}
    builtin_order = [name for name, info in infos.items() if info.builtin]

    def rank(plugin: str) -> tuple[int, int, str]:
        if plugin in builtin_order:
            return (0, builtin_order.index(plugin), plugin)
        return (1, 0, plugin)

    structs: list[type[Any]] = []
    titles: dict[type[Any], str] = {}
    for plugin in sorted(by_plugin, key=rank):
        info = infos.get(plugin)
        dist = " ".join(x for x in (info.distribution, info.version) if x) if info else ""
        title = f"{plugin} ({dist})" if dist else plugin
        for struct in by_plugin[plugin]:
            if struct not in titles:
                structs.append(struct)
                titles[struct] = title
    return structs, titles


class RunParser(argparse.ArgumentParser):
    """Its errors are the mistake and where help is: the usage of every plugin's
    setting, which argparse prints first, would bury them."""

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}{self._suggestion(extras)}")
        return parsed

    def _suggestion(self, extras: Sequence[str]) -> str:
        flags = [x.split("=", 1)[0] for x in extras if x.startswith("--")]
        close = difflib.get_close_matches(flags[0], list(self._option_string_actions), n=1) if flags else []
        return f" (did you mean {close[0]}?)" if close else ""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n{self.prog} --help lists every setting.\n")


def cmd_run(argv: Sequence[str]) -> int:
    selection, _ = _selection_parser().parse_known_args(argv)
    pm = create_plugin_manager(selection.plugins)
    # no abbreviated flags: one that works today would change meaning when a plugin adds a longer flag
    parser = RunParser(
        prog="flexserv run",
        parents=[_selection_parser()],
        description="Serve models over an OpenAI-compatible API.",
        allow_abbrev=False,
    )
    add_arguments(parser, *settings_groups(pm))
    args = parser.parse_args(argv)
    settings = hooks.resolve_plugin_settings(pm, cli=vars(args), config_file=args.config)
    core = settings.core
    configure_logging(core.log_level, core.log_format)
    if bool(core.ssl_keyfile) != bool(core.ssl_certfile):
        raise UsageError("--ssl-keyfile and --ssl-certfile go together: give both, or neither")

    from flexserv_core.app import create_app
    from flexserv_core.cli.serve import DrainingServer, check_address, uvicorn_config

    check_address(core.host, core.port)
    app = create_app(settings, pm)
    server = DrainingServer(uvicorn_config(app, core), app.state.flexserv)
    # uvicorn shuts down gracefully on SIGINT/SIGTERM, then re-raises the signal
    # with the handlers it found installed: make that a clean exit, not a kill.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _exit_cleanly)
    server.run()
    if not server.started:
        logging.getLogger("flexserv").error("the server did not start (see the errors above)")
        return EXIT_PLUGIN  # uvicorn's own start-up failure status, which a failed startup hook exits with
    return 0


def _exit_cleanly(signum: int, frame: object) -> None:
    raise SystemExit(0)


def plugin_listing(pm: FlexServPluginManager, settings: Settings | None) -> list[dict[str, Any]]:
    """Plugin infos with their routes, backends and commands, from those hooks alone (no app is built)."""
    routes: dict[str, list[Any]] = {}
    backends: dict[str, list[str]] = {}
    commands: dict[str, list[str]] = {}
    try:
        for name, (plugin, _) in hooks.commands(pm).items():
            commands.setdefault(plugin, []).append(name)
    except PluginError as exc:  # still list the plugins
        logging.getLogger("flexserv").warning("could not list commands: %s", exc)
        pm.mark_failed(exc.name, str(exc))
    if settings is not None:
        try:
            hooks.configure(pm, settings)
            routes = dict(hooks.routes_by_plugin(pm, settings))
            for registered in hooks.backends(pm, settings):
                backend = registered.backend
                backends.setdefault(registered.plugin, []).append(f"{backend.name} ({backend.kind})")
            # the platform services `flexserv run` builds next, so a plugin that breaks them is listed as failed
            hooks.tool_calling(pm, settings)
            hooks.constraint_compiler(pm, settings)
        except (PluginError, UsageError) as exc:  # still list the plugins
            logging.getLogger("flexserv").warning("could not list routes: %s", exc)
            if isinstance(exc, PluginError):
                pm.mark_failed(exc.name, str(exc))
    report = plugin_report(pm, routes)
    for entry in report:
        entry["commands"] = sorted(commands.get(entry["name"], []))
        entry["backends"] = backends.get(entry["name"], [])
    return report


def cmd_plugins(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="flexserv plugins",
        parents=[_selection_parser()],
        description="List plugins: name, distribution, version, hooks, routes, backends, commands, status.",
    )
    parser.add_argument("--json", action="store_true", help="Print JSON.")
    args = parser.parse_args(argv)
    pm = create_plugin_manager(args.plugins, strict=False)
    try:
        settings = hooks.resolve_plugin_settings(pm, cli={}, config_file=args.config)
    except (UsageError, PluginError) as exc:
        logging.getLogger("flexserv").warning("could not read settings: %s", exc)
        if isinstance(exc, PluginError):
            pm.mark_failed(exc.name, str(exc))
        settings = None
    report = plugin_listing(pm, settings)
    failed = [p["name"] for p in report if p["status"] == PluginStatus.FAILED]
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print_table(report)
    if failed:
        print(f"flexserv: {len(failed)} plugin(s) failed: {', '.join(failed)}", file=sys.stderr)
        return EXIT_PLUGIN
    return 0


def _print_table(report: list[dict[str, Any]]) -> None:
    for p in report:
        dist = f"{p['distribution']} {p['version'] or ''}".strip() if p["distribution"] else "-"
        print(f"{p['name']:<22} {p['status']:<8} {dist}")
        if p["hooks"]:
            print(f"    hooks:  {', '.join(p['hooks'])}")
        if p["routes"]:
            print(f"    routes: {', '.join(p['routes'])}")
        if p["backends"]:
            print(f"    backends: {', '.join(p['backends'])}")
        if p["commands"]:
            print(f"    commands: {', '.join(p['commands'])}")
        if p["error"]:
            print(f"    error:  {p['error']}")


CORE_HANDLERS: dict[str, Callable[[Sequence[str]], int]] = {"run": cmd_run, "plugins": cmd_plugins}


def _plugin_args(argv: Sequence[str]) -> list[str]:
    """The ``-p`` values anywhere in ``argv`` (no abbreviations: the rest belongs to the command)."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("-p", dest="plugins", action="append", default=[])
    known, _ = parser.parse_known_args(argv)
    return list(known.plugins)


def _discover(plugin_args: Sequence[str]) -> tuple[FlexServPluginManager, dict[str, hooks.PluginCommand]]:
    """Load plugins (a broken one is recorded, not fatal) and collect their commands."""
    pm = create_plugin_manager(plugin_args, strict=False)
    return pm, hooks.commands(pm)


def _usage(pm: FlexServPluginManager | None, commands: Mapping[str, hooks.PluginCommand]) -> str:
    lines = [f"usage: flexserv COMMAND [options]   (flexserv COMMAND --help)\n\nFlexServ {__version__}\n", "commands:"]
    width = max(len(n) for n in [*CORE_COMMANDS, *commands]) + 2
    lines += [f"  {name:<{width}}{text}" for name, text in CORE_COMMANDS.items()]
    if commands:
        lines.append("\ncommands added by plugins:")
        for name, (plugin, command) in sorted(commands.items()):
            info = pm.infos.get(plugin) if pm else None
            dist = f", {info.distribution}" if info and info.distribution else ""
            lines.append(f"  {name:<{width}}{command.help}  [plugin {plugin}{dist}]")
    return "\n".join(lines)


def _failed_plugins(pm: FlexServPluginManager) -> list[str]:
    return [f"{i.name}: {i.error}" for i in pm.plugin_infos() if i.status is PluginStatus.FAILED]


def run_plugin_command(name: str, argv: Sequence[str]) -> int:
    """``flexserv NAME ARGS`` for a command a plugin registered."""
    plugin_args = _plugin_args(argv)
    pm, commands = _discover(plugin_args)
    if name not in commands:
        known = ", ".join([*CORE_COMMANDS, *sorted(commands)])
        message = f"flexserv: unknown command {name!r}; choose one of {known}"
        failed = _failed_plugins(pm)
        if failed:
            message += "\nplugins that failed to load (one may add it):\n  " + "\n  ".join(failed)
        print(message, file=sys.stderr)
        return EXIT_USAGE
    plugin, command = commands[name]
    info = pm.infos.get(plugin)
    dist = info.distribution if info else None
    parser = argparse.ArgumentParser(
        prog=f"flexserv {name}",
        description=command.description or command.help,
        parents=[_selection_parser()] if command.settings else [],
        epilog=f"Added by plugin {plugin!r} ({dist or 'not from a distribution'}).",
    )
    if command.settings:
        pm = create_plugin_manager(plugin_args)  # as strict as `flexserv run`: a broken plugin stops it
        add_arguments(parser, *settings_groups(pm))
    else:
        parser.add_argument("-p", dest="plugins", action="append", default=[], metavar="NAME", help="Load plugin NAME.")
    try:
        if command.add_arguments is not None:
            command.add_arguments(parser)
    except Exception as exc:
        raise PluginCommandError(plugin, dist, name, exc) from exc
    args = parser.parse_args(argv)
    settings = None
    if command.settings:
        settings = hooks.resolve_plugin_settings(pm, cli=vars(args), config_file=args.config)
        hooks.configure(pm, settings)
        configure_logging(settings.core.log_level, settings.core.log_format)
    context = CommandContext(args=args, settings=settings, plugin_args=tuple(plugin_args))
    try:
        status = command.run(context)
    except (UsageError, PluginError):
        raise
    except Exception as exc:
        raise PluginCommandError(plugin, dist, name, exc) from exc
    return int(status or 0)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-V", "--version"):
        print(__version__)
        return 0
    try:
        if not argv or argv[0] in ("-h", "--help"):
            pm, commands = _discover(_plugin_args(argv))
            print(_usage(pm, commands))
            return 0 if argv else EXIT_USAGE
        handler = CORE_HANDLERS.get(argv[0])
        if handler is not None:
            return handler(argv[1:])
        return run_plugin_command(argv[0], argv[1:])
    except UsageError as exc:
        print(f"flexserv: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except PluginCommandError as exc:
        traceback.print_exception(exc.cause, file=sys.stderr)
        print(f"flexserv: {exc}", file=sys.stderr)
        return 1
    except PluginError as exc:
        _print_where(exc, argv)
        print(f"flexserv: {exc}", file=sys.stderr)
        return EXIT_PLUGIN


def _print_where(exc: PluginError, argv: Sequence[str]) -> None:
    """Where in the plugin's code it failed: the whole traceback with ``--log-level
    debug`` (or ``FLEXSERV_LOG_LEVEL=debug``), else the line that raised."""
    cause = exc.__cause__ or getattr(exc, "cause", None)
    if not isinstance(cause, BaseException) or cause.__traceback__ is None:
        return
    debug = "--log-level=debug" in argv or os.environ.get("FLEXSERV_LOG_LEVEL", "").lower() == "debug"
    debug = debug or any(a == "--log-level" and b == "debug" for a, b in itertools.pairwise(argv))
    if debug:
        traceback.print_exception(cause, file=sys.stderr)
        return
    if isinstance(cause, SyntaxError) and cause.filename:
        where = f"{cause.filename}:{cause.lineno}"
    else:
        frames = [f for f in traceback.extract_tb(cause.__traceback__) if not f.filename.startswith("<frozen")]
        if not frames:
            return
        where = f"{frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name}"
    print(f"flexserv: raised at {where} (--log-level debug prints the traceback)", file=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
