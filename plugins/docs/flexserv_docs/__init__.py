"""FlexServ's API schema and docs page: ``/openapi.json``, ``/openapi.yaml`` and ``/docs``."""

from flexserv_docs.schema import build_schema, cached_schema

__all__ = ["build_schema", "cached_schema"]
