"""The transformers text-generation backend plugin (distribution ``flexserv-transformers``)."""
