"""Backend base classes and the built-in transformers backend."""
