"""FlexServ plugin: sentence-transformers embedding backend with micro-batching."""

__version__ = "0.1.0"
