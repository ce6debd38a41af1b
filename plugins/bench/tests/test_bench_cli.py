"""``flexserv bench`` against a real FlexServ app (uvicorn on loopback, fake backend).

Most tests call the bench's own ``main``; the process tests run ``flexserv bench``
itself, through the plugin's ``flexserv_register_commands``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from bench_server import Served
from flexserv_bench.cli import main
from flexserv_bench.client import RequestSpec
from flexserv_bench.loadgen import run_level

from flexserv_core.testing import FAKE_SCRIPT, flexserv_cmd, free_port


def _bench(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any] | None, str]:
    code = main(["--json", *args])
    out = capsys.readouterr()
    return code, (json.loads(out.out) if out.out.strip() else None), out.err


def _ordered(stat: dict[str, float | None]) -> bool:
    return stat["p50"] <= stat["p95"] <= stat["p99"] <= stat["max"]  # type: ignore[operator]


def test_levels_counts_and_ordered_percentiles(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    model = served.fake.backend.models[0] if served.fake.backend.models else None
    calls_before = len(model.params_log) if model else 0
    code, report, _ = _bench(
        capsys, "--url", served.url, "--concurrency", "1,4", "--requests", "8", "--max-tokens", "12", "--quiet"
    )
    assert code == 0 and report is not None
    assert report["schema_version"] == 1
    config = report["config"]
    assert config["model"] == "fake-model"  # found through GET /v1/models
    assert config["concurrency"] == [1, 4] and config["requests_per_level"] == 8 and config["prompts"] == 50
    levels = report["levels"]
    assert [lv["concurrency"] for lv in levels] == [1, 4]
    for level in levels:
        assert (level["requests"], level["completed"], level["errors"]) == (8, 8, 0)
        assert level["output_tokens"] == 8 * 12  # the fake always streams max_tokens tokens
        assert level["error_kinds"] == {}
        for name in ("ttft_s", "itl_s", "e2e_s"):
            assert _ordered(level[name]), (name, level[name])
        assert level["output_tokens_per_s"] == pytest.approx(96 / level["duration_s"])
        # The fake sleeps 10 ms before each of its 12 tokens, so every stream ends at least 11 gaps after its
        # first token, and so does the median. (Single gaps and one stream's TTFT against another's end are not
        # bounded: on a busy machine a client that falls behind reads several events at once.)
        assert level["e2e_s"]["p50"] >= level["ttft_s"]["p50"] + 11 * 0.010
    # Four clients over a sleeping backend: much more throughput than one.
    assert levels[1]["output_tokens_per_s"] > 2 * levels[0]["output_tokens_per_s"]
    model = served.fake.backend.models[0]
    new_calls = model.params_log[calls_before:]
    assert len(new_calls) == 1 + 16  # one warm-up request, then two levels of 8
    assert {(p.max_tokens, p.temperature) for p in new_calls} == {(12, 0.0)}


async def test_each_request_is_timed(served: Served) -> None:
    spec = RequestSpec(model="fake-model", max_tokens=6, system_prompt="be brief")
    results, duration = await run_level(
        served.url, spec, ["a", "b", "c"], concurrency=3, requests=5, progress_stream=None
    )
    assert len(results) == 5 and all(r.ok for r in results)
    for r in results:
        assert r.ttft is not None and r.e2e is not None and 0 < r.ttft < r.e2e <= duration
        assert len(r.itls) == 5 and r.output_tokens == r.usage_tokens == 6
        assert r.text == FAKE_SCRIPT[:6]
        assert sum(r.itls) == pytest.approx(r.e2e - r.ttft, abs=0.05)


async def test_completions_endpoint(served: Served) -> None:
    spec = RequestSpec(model="fake-model", endpoint="completions", max_tokens=5, system_prompt="prefix")
    results, _ = await run_level(served.url, spec, ["x"], concurrency=2, requests=2, progress_stream=None)
    assert [r.text for r in results] == [FAKE_SCRIPT[:5]] * 2 and all(r.output_tokens == 5 for r in results)


def test_wrong_model_counts_404s(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    code, report, _ = _bench(capsys, "--url", served.url, "--model", "no-such-model", "--requests", "3", "--quiet")
    assert code == 1  # every request failed, but a report came out
    assert report is not None
    level = report["levels"][0]
    assert (level["completed"], level["errors"]) == (0, 3)
    assert level["error_kinds"] == {"http_404": 3}
    assert "no-such-model" in level["error_samples"][0]["message"]
    assert level["ttft_s"]["p50"] is None


def test_timeouts_are_errors_not_hangs(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    # 200 tokens x 10 ms = 2 s per request against a 0.3 s limit.
    code, report, _ = _bench(
        capsys,
        *("--url", served.url, "--model", "fake-model", "--max-tokens", "200", "--timeout", "0.3"),
        *("--requests", "2", "--concurrency", "2", "--warmup", "0", "--quiet"),
    )
    assert code == 1 and report is not None
    assert report["levels"][0]["error_kinds"] == {"timeout": 2}
    assert report["levels"][0]["duration_s"] < 1.5


def test_connection_refused(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    code, report, _ = _bench(capsys, "--url", url, "--model", "m", "--requests", "2", "--warmup", "0", "--quiet")
    assert code == 1 and report is not None
    assert report["levels"][0]["error_kinds"] == {"connect": 2}


def test_errors_inside_the_stream(failing_server: Served, capsys: pytest.CaptureFixture[str]) -> None:
    code, report, _ = _bench(capsys, "--url", failing_server.url, "--requests", "2", "--warmup", "0", "--quiet")
    assert code == 1 and report is not None
    assert report["levels"][0]["error_kinds"] == {"stream_error": 2}


def test_custom_dataset(served: Served, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "mine.jsonl"
    path.write_text('{"prompt": "alpha"}\n{"prompt": "beta"}\n', encoding="utf-8")
    code, report, _ = _bench(
        capsys, "--url", served.url, "--dataset", str(path), "--requests", "3", "--max-tokens", "4", "--quiet"
    )
    assert code == 0 and report is not None
    assert report["config"]["dataset"] == str(path) and report["config"]["prompts"] == 2
    assert report["levels"][0]["output_tokens"] == 12


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dataset", "BAD"], "line 2: not valid JSON"),
        (["--dataset", "MISSING"], "cannot read dataset"),
        (["--tokenizer", "MISSING"], "cannot load tokenizer"),
    ],
)
def test_usage_errors_exit_2(
    served: Served, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('"fine"\n{oops\n', encoding="utf-8")
    paths = {"BAD": str(bad), "MISSING": str(tmp_path / "absent")}
    code, report, err = _bench(capsys, "--url", served.url, *[paths.get(a, a) for a in args])
    assert code == 2 and report is None
    assert "flexserv bench: error:" in err and message in err


@pytest.mark.parametrize("value", ["0", "1,x", "", "2000"])
def test_bad_concurrency_is_a_usage_error(capsys: pytest.CaptureFixture[str], value: str) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--concurrency", value])
    assert info.value.code == 2
    assert "--concurrency" in capsys.readouterr().err


@pytest.mark.slow
def test_process_progress_on_stderr_json_on_stdout(served: Served) -> None:
    proc = subprocess.run(
        flexserv_cmd(
            "bench", "--url", served.url, "--concurrency", "2", "--requests", "4", "--max-tokens", "5", "--json"
        ),
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)  # stdout is the JSON document and nothing else
    assert report["levels"][0]["output_tokens"] == 20
    # One line rewritten in place with carriage returns, ending with the final counts.
    assert proc.stderr.startswith(b"\rc=2 ") and proc.stderr.endswith(b"\rc=2 4/4 requests, 20 tokens, 0 errors\n")
    text = subprocess.run(
        flexserv_cmd("bench", "--url", served.url, "--requests", "2", "--max-tokens", "3", "--quiet"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert text.returncode == 0 and text.stderr == ""
    assert "TTFT p50" in text.stdout and "fake-model" in text.stdout


def test_extra_body_and_responses_file(served: Served, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "responses.jsonl"
    calls_before = len(served.fake.backend.models[0].params_log) if served.fake.backend.models else 0
    code, report, _ = _bench(
        capsys,
        *("--url", served.url, "--requests", "3", "--max-tokens", "7", "--warmup", "0", "--quiet"),
        *("--extra-body", '{"seed": 1234, "max_tokens": 999}', "--responses", str(out)),
    )
    assert code == 0 and report is not None
    new_calls = served.fake.backend.models[0].params_log[calls_before:]
    assert [(p.seed, p.max_tokens) for p in new_calls] == [(1234, 7)] * 3  # the bench's own fields win
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["index"] for r in records] == [0, 1, 2]
    assert {r["text"] for r in records} == {FAKE_SCRIPT[:7]}
    assert all(r["error"] is None and r["output_tokens"] == 7 and r["ttft_s"] < r["e2e_s"] for r in records)
    assert records[1]["prompt"] != records[0]["prompt"]


@pytest.mark.parametrize("value", ["[1]", "{not json"])
def test_bad_extra_body_is_a_usage_error(capsys: pytest.CaptureFixture[str], value: str) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--extra-body", value])
    assert info.value.code == 2 and "--extra-body" in capsys.readouterr().err
