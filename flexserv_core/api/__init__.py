"""The HTTP API: OpenAI-compatible routes, FlexServ routes, errors and schemas."""
