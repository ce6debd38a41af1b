"""FlexServ plugin: reranking/scoring, text classification and token classification (NER)."""

__version__ = "0.1.0"
