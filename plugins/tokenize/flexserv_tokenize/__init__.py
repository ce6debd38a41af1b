"""FlexServ plugin: vLLM's ``POST /tokenize`` and ``POST /detokenize`` for text models."""

__version__ = "0.1.0"
