"""FlexServ: a plugin-based, OpenAI-compatible model server."""

from flexserv_core._version import VERSION as __version__

__all__ = ["__version__"]
