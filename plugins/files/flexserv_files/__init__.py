"""FlexServ plugin: OpenAI's Files API (``/v1/files``) on the server's state layer."""

__version__ = "0.1.0"
