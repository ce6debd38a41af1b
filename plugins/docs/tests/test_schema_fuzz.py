"""Schema fuzzing of ``/openapi.json`` with schemathesis: a bounded, seeded run
(hypothesis ``derandomize``) against a real socket with the fake backend, so
generation is fast; no 5xx, and no request runs past its bound."""

from __future__ import annotations

import time
from typing import Any

import pytest

from flexserv_core.testing import FakeBackendPlugin, ServedApp, make_app

pytestmark = pytest.mark.slow  # ~60 s of fuzzing

#: Examples per operation, and the whole run's budget in seconds.
EXAMPLES = 40
BUDGET_S = 90.0
#: No single request may take longer (the fake generates at most a few thousand characters).
REQUEST_BOUND_S = 10.0


def test_fuzzed_requests_get_no_server_error_and_finish_in_bounds() -> None:
    # imported here: collecting the fast tests (``-m "not slow"``) need not pay for them
    import hypothesis
    import schemathesis

    app = make_app([FakeBackendPlugin(), "audio", "docs"], settings={"max_request_tokens": 4096})
    with ServedApp(app) as base_url:
        schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json")
        started = time.monotonic()
        slow: list[str] = []
        errors: list[str] = []
        unsatisfiable: list[str] = []
        for result in schema.get_all_operations():
            operation = result.ok()

            @hypothesis.settings(
                max_examples=EXAMPLES,
                deadline=None,
                derandomize=True,
                database=None,
                suppress_health_check=list(hypothesis.HealthCheck),
            )
            @hypothesis.given(case=operation.as_strategy())
            def run(case: Any) -> None:
                t0 = time.monotonic()
                response = case.call(base_url=base_url, timeout=REQUEST_BOUND_S * 3)
                took = time.monotonic() - t0
                label = f"{case.method} {case.formatted_path} -> {response.status_code}"
                if response.status_code >= 500:
                    errors.append(f"{label}: {response.text[:200]}")
                if took > REQUEST_BOUND_S:
                    slow.append(f"{label} took {took:.1f} s")

            try:
                run()
            except hypothesis.errors.Unsatisfiable:  # schemathesis cannot build a valid example of it
                unsatisfiable.append(operation.label)
            assert time.monotonic() - started < BUDGET_S, "the fuzzing run exceeded its budget"
        assert not errors, "\n".join(errors[:20])
        assert not slow, "\n".join(slow[:20])
        assert len(unsatisfiable) <= 1, unsatisfiable
