"""FlexServ plugin: decode uploaded audio to mono float32 at the model's rate."""

__version__ = "0.1.0"
