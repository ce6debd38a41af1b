"""The transformers text-generation backend plugin (distribution ``flexserv-transformers``)."""

from flexserv_transformers.openmp import configure_openmp

# Before any module of this package imports torch (see flexserv_transformers.openmp).
configure_openmp()
