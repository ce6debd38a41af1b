"""The edge: what every request meets before a route runs (keys, request ids, CORS, logs)."""
