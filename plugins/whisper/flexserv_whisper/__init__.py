"""FlexServ plugin: Whisper speech recognition (faster-whisper and transformers)."""

__version__ = "0.1.0"
