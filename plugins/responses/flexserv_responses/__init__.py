"""FlexServ plugin: OpenAI's Responses API (``/v1/responses``) on the core's text session."""

__version__ = "0.1.0"
