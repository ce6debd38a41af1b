"""``flexserv new-plugin NAME``: a minimal installable FlexServ plugin to start from."""

from flexserv_scaffold.scaffold import plugin_files, write_plugin

__all__ = ["plugin_files", "write_plugin"]
