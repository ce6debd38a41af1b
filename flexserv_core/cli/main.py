"""``flexserv``: run the server, list plugins, benchmark a server.

Parsing happens in two passes: the first reads only the plugin selection
(``-p``) and ``--config``, so that the plugins can be loaded; the second knows
every plugin's settings, which therefore appear in ``flexserv run --help``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from flexserv_core import __version__, hooks
from flexserv_core.errors import PluginError, UsageError
from flexserv_core.plugin_manager import FlexServPluginManager, create_plugin_manager
from flexserv_core.plugin_report import plugin_report
from flexserv_core.settings import Settings, add_arguments, resolve_settings

EXIT_USAGE = 2
EXIT_PLUGIN = 3


def _selection_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
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


def _settings_from(args: argparse.Namespace, pm: FlexServPluginManager) -> Settings:
    structs = hooks.settings_structs(pm)
    cli = {k: v for k, v in vars(args).items() if k not in {"plugins", "config", "command", "json", "func"}}
    return resolve_settings(structs, cli=cli, config_file=args.config)


def _configure_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)-7s %(name)s: %(message)s", force=True)


def cmd_run(argv: Sequence[str]) -> int:
    selection, _ = _selection_parser().parse_known_args(argv)
    pm = create_plugin_manager(selection.plugins)
    parser = argparse.ArgumentParser(
        prog="flexserv run", parents=[_selection_parser()], description="Serve models over an OpenAI-compatible API."
    )
    add_arguments(parser, hooks.settings_structs(pm))
    args = parser.parse_args(argv)
    settings = _settings_from(args, pm)
    _configure_logging(settings.core.log_level)

    import uvicorn

    from flexserv_core.app import create_app

    app = create_app(settings, pm)
    config = uvicorn.Config(
        app,
        host=settings.core.host,
        port=settings.core.port,
        log_level=settings.core.log_level,
        lifespan="on",
        timeout_graceful_shutdown=int(settings.core.shutdown_timeout) or None,
        log_config=None,
    )
    server = uvicorn.Server(config)
    # uvicorn shuts down gracefully on SIGINT/SIGTERM, then re-raises the signal
    # with the handlers it found installed: make that a clean exit, not a kill.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _exit_cleanly)
    server.run()
    if not server.started:
        logging.getLogger("flexserv").error("the server did not start (see the errors above)")
        return 1
    return 0


def _exit_cleanly(signum: int, frame: object) -> None:
    raise SystemExit(0)


def plugin_listing(pm: FlexServPluginManager, settings: Settings | None) -> list[dict[str, Any]]:
    """Plugin infos with their routes, from the routes hook alone (no app is built)."""
    routes: dict[str, list[Any]] = {}
    if settings is not None:
        try:
            hooks.configure(pm, settings)
            routes = dict(hooks.routes_by_plugin(pm, settings))
        except (PluginError, UsageError) as exc:  # still list the plugins
            logging.getLogger("flexserv").warning("could not list routes: %s", exc)
    return plugin_report(pm, routes)


def cmd_plugins(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="flexserv plugins",
        parents=[_selection_parser()],
        description="List plugins: name, distribution, version, hooks, routes, status.",
    )
    parser.add_argument("--json", action="store_true", help="Print JSON.")
    args = parser.parse_args(argv)
    pm = create_plugin_manager(args.plugins, strict=False)
    try:
        settings = resolve_settings(hooks.settings_structs(pm), cli={}, config_file=args.config)
    except UsageError:
        settings = None
    report = plugin_listing(pm, settings)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    for p in report:
        dist = f"{p['distribution']} {p['version'] or ''}".strip() if p["distribution"] else "-"
        print(f"{p['name']:<22} {p['status']:<8} {dist}")
        if p["hooks"]:
            print(f"    hooks:  {', '.join(p['hooks'])}")
        if p["routes"]:
            print(f"    routes: {', '.join(p['routes'])}")
        if p["error"]:
            print(f"    error:  {p['error']}")
    return 0


def cmd_bench(argv: Sequence[str]) -> int:
    try:
        bench = importlib.import_module("flexserv_core.bench.cli")
    except ImportError as exc:  # pragma: no cover - bench ships with the core
        print(f"flexserv bench is unavailable: {exc}", file=sys.stderr)
        return 1
    parser = argparse.ArgumentParser(prog="flexserv bench", description="Load-test an OpenAI-compatible server.")
    bench.add_arguments(parser)
    return int(bench.run(parser.parse_args(argv)) or 0)


COMMANDS = {"run": cmd_run, "plugins": cmd_plugins, "bench": cmd_bench}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(
            f"usage: flexserv {{{','.join(COMMANDS)}}} [options]\n\nFlexServ {__version__}\n"
            "  run       serve models (flexserv run --help lists every setting)\n"
            "  plugins   list plugins and what they add\n"
            "  bench     load-test an OpenAI-compatible server"
        )
        return 0 if argv else EXIT_USAGE
    if argv[0] in ("-V", "--version"):
        print(__version__)
        return 0
    command = COMMANDS.get(argv[0])
    if command is None:
        print(f"flexserv: unknown command {argv[0]!r}; choose one of {', '.join(COMMANDS)}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return command(argv[1:])
    except UsageError as exc:
        print(f"flexserv: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except PluginError as exc:
        print(f"flexserv: {exc}", file=sys.stderr)
        return EXIT_PLUGIN


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
