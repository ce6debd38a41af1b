"""The transformers text-generation backend plugin (distribution ``flexserv-transformers``)."""

from flexserv_core import prefer_passive_openmp

# Before any module of this package imports torch (see flexserv_core.openmp).
prefer_passive_openmp()
