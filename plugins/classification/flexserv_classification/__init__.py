"""FlexServ plugin: reranking/scoring, text classification and token classification (NER)."""

from flexserv_torch import prefer_passive_openmp

__version__ = "0.1.0"

# Before any module of this package imports torch (see flexserv_torch.openmp).
prefer_passive_openmp()
