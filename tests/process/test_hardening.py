"""Slow and oversized clients, expensive bodies, honest errors and metrics. From the second
security review: /v2 parsed within the limits, bounded explanation answers, the write timeout,
the 413 that closes, API keys, the Host allow-list, /v2 media types, memory handed back; the
probes and the abuse mix of bench/reliability/ at CI size.

In-process (ASGI) for what the app decides: text limits before tokenizing (NFKC expansion),
invisible text, excerpts of user input, no server paths, 499 for a client that leaves, the body
timeout and deadline during the body read, drain with a stalled client, /docs off.
Against a real `python -m service` for what the HTTP protocol layer (service.http.http) decides:
header size limit, header timeout (idle and slowloris), the connection cap, a short body,
SIGTERM with a stalled client. The full-size runs are `python -m bench.reliability expansion`
and `slow-clients` (short forms below).
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from pathlib import Path

import httpx
import pytest

from core.tasks import TASKS
from tests.bundles import copy_repository, metric_samples, running_app
from service.settings import Settings

REPO = Path(__file__).resolve().parents[2]
from bench.harness import ServiceProcess  # noqa: E402
from bench.reliability.abuse import run_abuse  # noqa: E402
from bench.reliability.expansion import run_expansion  # noqa: E402
from bench.reliability.probes import (  # noqa: E402
    explain_flood_body,
    http_request,
    run_probes,
    unread_connection,
    v2_bad_bodies,
    v2_verify_body,
)
from bench.reliability.slow_clients import run_slow_clients  # noqa: E402

# without the fixes several of these would wait forever (a stalled body, an idle connection)
pytestmark = pytest.mark.timeout(60)


def settings(repo, **over) -> Settings:
    return Settings(model_repository=repo, **over)


def error_of(r: httpx.Response, status: int, code: str) -> str:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and body["error"]["code"] == code
    return body["error"]["message"]


# --- 1. NFKC expansion ------------------------------------------------------------------------

def test_check_text_stops_right_after_the_limit_however_much_a_character_expands(monkeypatch):
    """Counted in characters normalized, not timed (a 50 ms bound failed at 50.5 ms on a busy
    machine): 300,000 characters that expand 18x each are refused after at most one chunk past
    the 100,000-character limit, not normalized in full (5.4 M characters)."""
    import unicodedata

    from core.tokenization import CHECK_CHUNK_CHARS, TextTooLong, check_text

    assert check_text("abc", 3).normalized_length == 3
    assert check_text("\ufdfa", 18).normalized_length == 18  # one character, 18 after NFKC
    with pytest.raises(TextTooLong):
        check_text("\ufdfa" * 1000, 17_999)
    normalized = []
    normalize = unicodedata.normalize

    def counting(form: str, text: str) -> str:
        normalized.append(len(text))
        return normalize(form, text)

    monkeypatch.setattr(unicodedata, "normalize", counting)
    with pytest.raises(TextTooLong):
        check_text("\ufdfa" * 300_000, 100_000)
    assert 0 < sum(normalized) <= 100_000 // 18 + CHECK_CHUNK_CHARS, sum(normalized)


def test_expanding_text_is_refused_before_tokenizing(service_bundles):
    async def scenario():
        async with running_app(settings(service_bundles)) as (app, client):
            # 10,000 characters, 180,000 after NFKC: over the per-text limit
            r = await client.post("/classify", json={"text": "\ufdfa" * 10_000})
            assert "after Unicode (NFKC) normalization" in error_of(r, 422, "invalid_input")
            r = await client.post("/classify", json={"text": "a" * 100_001})
            assert "100001 characters" in error_of(r, 422, "invalid_input")
            # each text within its limit, together over the request's budget of 256 Ki characters
            inputs = [{"text": "\ufdfa" * 5_000}] * 20  # 90,000 each after NFKC
            r = await client.post("/classify", json={"inputs": inputs})
            message = error_of(r, 422, "invalid_input")
            assert message.startswith("inputs[2].text") and "request's texts" in message
            r = await client.post("/classify", json={"inputs": inputs[:2]})  # 180,000: accepted
            assert r.status_code == 200, r.text
            r = await client.post("/verify", json={"claim": "a dog runs", "evidence": ["ok", "\ufdfa" * 6000]})
            assert error_of(r, 422, "invalid_input").startswith("evidence[1]")
    asyncio.run(scenario())


# --- 7. invisible text ------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["\x00\x00\x00", "\u200b\u200c\u200d", "\ufeff\u2060", "\x00\u200b \t",
                                  "\u0301\u0301", "\u3000\u200e"])
def test_text_with_no_visible_character_is_invalid(service_bundles, text):
    async def scenario():
        async with running_app(settings(service_bundles)) as (app, client):
            r = await client.post("/classify", json={"text": text})
            assert "no visible character" in error_of(r, 422, "invalid_input")
            r = await client.post("/entailment", json={"inputs": [{"premise": "a man sleeps", "hypothesis": "ok"},
                                                                   {"premise": "a man", "hypothesis": text}]})
            assert error_of(r, 422, "invalid_input").startswith("inputs[1].hypothesis")
            r = await client.post("/classify", json={"text": "ok" + text})  # one visible character is enough
            assert r.status_code == 200, r.text
    asyncio.run(scenario())


# --- 8. no echo of user input in full, no server paths ---------------------------------------

def test_unknown_model_name_is_quoted_short_and_escaped(service_bundles):
    async def scenario():
        async with running_app(settings(service_bundles)) as (app, client):
            r = await client.post("/classify", json={"text": "hello", "model": "\x1b[31m" + "m" * 1_000_000})
            message = error_of(r, 422, "unknown_model")
            assert len(message) < 300 and "(1000005 characters)" in message
            assert "\x1b" not in message and "\\x1b[31m" in message
            assert "sentiment" in message  # still says which models exist
    asyncio.run(scenario())


def test_failed_bundle_is_listed_without_server_paths(service_bundles, tmp_path):
    repo = copy_repository(service_bundles, tmp_path / "private" / "repository")
    model = repo / "nli" / "model.onnx"
    data = bytearray(model.read_bytes())
    data[len(data) // 3] ^= 0x01
    model.write_bytes(bytes(data))
    (repo / "fever" / "tokenizer.json").unlink()

    async def scenario():
        async with running_app(settings(repo)) as (app, client):
            models = {m["name"]: m for m in (await client.get("/v1/models")).json()["models"]}
            return models, app.state.service.models
    models, entries = asyncio.run(scenario())
    assert models["nli"]["status"] == models["fever"]["status"] == "failed"
    assert "nli/model.onnx" in models["nli"]["error"] and "sha256" in models["nli"]["error"]
    assert "fever/tokenizer.json" in models["fever"]["error"]
    for name in ("nli", "fever"):
        assert str(tmp_path) not in models[name]["error"] and "private" not in models[name]["error"]
        assert str(repo) in entries[name].error  # the log keeps the full path for the operator


# --- 5. a client that leaves mid-body is 499, not 500 ----------------------------------------

def test_client_leaving_mid_body_is_counted_499(service_bundles):
    async def scenario():
        async with running_app(settings(service_bundles)) as (app, client):
            messages = [{"type": "http.request", "body": b'{"text": "hel', "more_body": True},
                        {"type": "http.disconnect"}]
            sent = []

            async def receive():
                return messages.pop(0) if messages else {"type": "http.disconnect"}

            async def send(message):
                sent.append(message)

            scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                     "scheme": "http", "path": "/classify", "raw_path": b"/classify", "query_string": b"",
                     "root_path": "", "headers": [(b"content-type", b"application/json"),
                                                  (b"content-length", b"100")],
                     "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
            await app(scope, receive, send)
            assert sent == []  # nobody to answer
            counts = metric_samples((await client.get("/metrics")).text, "attserve_requests_total")
            return counts
    counts = asyncio.run(scenario())
    statuses = {dict(k)["status"]: v for k, v in counts.items() if dict(k)["endpoint"] == "classify"}
    assert statuses == {"499": 1.0}


# --- 3/4/6. body timeout, deadline over the body read, drain with a stalled client ------------

async def _post_stalled(app, body_start: bytes, declared: int):
    """A POST /classify whose body stops after `body_start`; returns (status, body, seconds)."""
    sent = []
    first = [{"type": "http.request", "body": body_start, "more_body": True}]
    stalled = asyncio.Event()

    async def receive():
        if first:
            return first.pop()
        await stalled.wait()  # never set: the client stalls
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": "/classify", "raw_path": b"/classify", "query_string": b"",
             "root_path": "", "headers": [(b"content-type", b"application/json"),
                                          (b"content-length", str(declared).encode())],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80), "state": {}}
    started = time.perf_counter()
    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    headers = dict(next(m["headers"] for m in sent if m["type"] == "http.response.start"))
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    assert headers[b"content-type"] == b"application/json" and headers[b"connection"] == b"close"
    return status, json.loads(body), time.perf_counter() - started


def test_short_body_gets_408_within_the_body_timeout(service_bundles):
    async def scenario():
        async with running_app(settings(service_bundles, body_timeout_s=0.3)) as (app, client):
            return await _post_stalled(app, b'{"text": "hel', 100)
    status, body, seconds = asyncio.run(scenario())
    assert status == 408 and body["error"]["code"] == "request_timeout"
    assert body["error"]["message"] == "request body not received within 0.3 s (limit set by ATTSERVE_BODY_TIMEOUT_S)"
    assert 0.25 < seconds < 1.0


def test_deadline_covers_the_body_read(service_bundles):
    async def scenario():
        async with running_app(settings(service_bundles, request_timeout_ms=300, body_timeout_s=10)) as (app, _):
            return await _post_stalled(app, b'{"text": "hel', 100)
    status, body, seconds = asyncio.run(scenario())
    assert status == 504 and body["error"]["code"] == "deadline_exceeded"
    assert 0.25 < seconds < 0.6


def test_drain_answers_a_stalled_body_at_once_with_json_503(service_bundles):
    async def scenario():
        async with running_app(settings(service_bundles, body_timeout_s=30)) as (app, _):
            request = asyncio.create_task(_post_stalled(app, b'{"text": "hel', 100))
            await asyncio.sleep(0.2)
            app.state.service.begin_drain()
            return await asyncio.wait_for(request, 2)
    status, body, seconds = asyncio.run(scenario())
    assert status == 503 and body["error"]["code"] == "shutting_down"
    assert seconds < 1.0


# --- 9. /docs off -----------------------------------------------------------------------------

def test_docs_are_off_unless_asked_for(service_bundles):
    """Swagger UI and ReDoc load their scripts from a CDN: off by default."""
    async def scenario():
        out = []
        for over in ({}, {"docs": True}):
            async with running_app(settings(service_bundles, **over)) as (app, client):
                out.append([(await client.get(p)).status_code for p in ("/docs", "/redoc", "/openapi.json")])
        return out
    assert asyncio.run(scenario()) == [[404, 404, 200], [200, 200, 200]]


def test_images_turn_docs_off():
    for dockerfile in ("docker/Dockerfile", "docker/Dockerfile.gpu"):
        assert "ATTSERVE_DOCS=false" in (REPO / dockerfile).read_text(), dockerfile


# --- 2/3/6 against the real server ------------------------------------------------------------

@pytest.fixture(scope="module")
def guarded_server(service_bundles, tmp_path_factory):
    log = tmp_path_factory.mktemp("guarded") / "service.log"
    server = ServiceProcess(service_bundles, log, header_timeout_s=0.5, body_timeout_s=0.5,
                                        keep_alive_timeout_s=0.5, max_header_bytes=4096, max_connections=30,
                                        write_timeout_s=0.5)
    with server.start():
        yield server


def read_until_closed(sock: socket.socket, timeout_s: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and when it closed (s)."""
    sock.settimeout(timeout_s)
    started, data = time.monotonic(), b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except socket.timeout:
        raise AssertionError(f"connection still open after {timeout_s} s; got {data[:200]!r}") from None
    except ConnectionResetError:
        pass
    return data, time.monotonic() - started


def json_error(raw: bytes) -> tuple[int, dict]:
    head, _, body = raw.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head.lower(), head
    return int(head.split()[1]), json.loads(body)


def test_oversized_headers_get_431_and_the_server_keeps_serving(guarded_server):
    with socket.create_connection(("127.0.0.1", guarded_server.port)) as sock:
        sock.sendall(b"GET /health/live HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * 200_000 + b"\r\n\r\n")
        raw, _ = read_until_closed(sock, 3)
    status, body = json_error(raw)
    assert status == 431 and body["error"]["code"] == "headers_too_large"
    assert "(limit set by ATTSERVE_MAX_HEADER_BYTES)" in body["error"]["message"]
    r = httpx.get(guarded_server.base + "/health/live", headers={"x-fine": "a" * 3000})
    assert r.status_code == 200


def test_silent_and_slowloris_connections_are_closed_at_the_header_timeout(guarded_server):
    silent = socket.create_connection(("127.0.0.1", guarded_server.port))
    slow = socket.create_connection(("127.0.0.1", guarded_server.port))
    slow.sendall(b"GET /health/live HTTP/1.1\r\n")
    started = time.monotonic()
    slow.settimeout(0.05)
    closed_after = None
    while time.monotonic() - started < 3:  # one header byte every 50 ms, never the end
        try:
            slow.sendall(b"x")
            if slow.recv(65536):
                closed_after = time.monotonic() - started
                break
        except socket.timeout:
            continue
        except (BrokenPipeError, ConnectionResetError):
            closed_after = time.monotonic() - started
            break
    raw, silent_s = read_until_closed(silent, 3)
    silent_s += time.monotonic() - started - silent_s  # measured from the same start
    slow.close()
    silent.close()
    assert closed_after is not None and closed_after < 1.0, closed_after
    assert json_error(raw) == (408, {"error": {"code": "request_timeout",
                                               "message": "request headers not received within 0.5 s "
                                                          "(limit set by ATTSERVE_HEADER_TIMEOUT_S)"}})
    assert silent_s < 1.0


def test_short_content_length_is_answered_408_over_tcp(guarded_server):
    with socket.create_connection(("127.0.0.1", guarded_server.port)) as sock:
        sock.sendall(b"POST /classify HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                     b"content-length: 100\r\n\r\n{\"text\": \"hel")
        raw, seconds = read_until_closed(sock, 3)
    status, body = json_error(raw)
    assert status == 408 and body["error"]["code"] == "request_timeout" and seconds < 1.5


def test_connection_cap_pushes_out_idle_connections_not_clients(guarded_server):
    idle = [socket.create_connection(("127.0.0.1", guarded_server.port)) for _ in range(60)]  # cap is 30
    try:
        latencies = []
        with httpx.Client(base_url=guarded_server.base) as client:
            for _ in range(20):
                started = time.monotonic()
                r = client.post("/classify", json={"text": "a fine day"})
                latencies.append(time.monotonic() - started)
                assert r.status_code == 200, r.text
        assert max(latencies) < 0.5
        # every idle one is closed: pushed out to make room (no answer), or at the header timeout (408)
        answers = [read_until_closed(sock, 2)[0] for sock in idle]
        assert sum(a == b"" for a in answers) >= 20
        assert all(a == b"" or json_error(a)[0] == 408 for a in answers)
    finally:
        for sock in idle:
            sock.close()


def test_sigterm_with_a_stalled_client_drains_on_time_and_logs_truthfully(service_bundles, tmp_path):
    server = ServiceProcess(service_bundles, tmp_path / "service.log", body_timeout_s=30,
                                        shutdown_timeout_s=10)
    with server.start():
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(b"POST /classify HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                     b"content-length: 100\r\n\r\n{\"text\": \"hel")
        time.sleep(0.3)
        exit_s = server.terminate()
        raw, _ = read_until_closed(sock, 3)
        sock.close()
    assert exit_s < 3, exit_s
    status, body = json_error(raw)
    assert status == 503 and body["error"]["code"] == "shutting_down"
    errors = [r for r in server.log_records() if r["level"] == "ERROR"]
    assert errors == [], errors


# --- the acceptance runs at CI size (full size: python -m bench.reliability expansion / slow-clients)

def test_expansion_short(service_bundles, tmp_path):
    result = run_expansion(service_bundles, concurrent=6, rounds=1, work=tmp_path)
    print(json.dumps({k: v for k, v in result.items() if k != "rss_samples"}))
    kinds = result["per_kind"]
    assert set(kinds["one_text"]["statuses"]) == {"422"}
    assert set(kinds["batch_under_text_limit"]["statuses"]) == {"422"}
    assert set(kinds["accepted_plain_batch"]["statuses"]) == {"200"}
    assert result["passed"], result["rss_growth_mb"]


def test_slow_clients_short(service_bundles, tmp_path):
    result = run_slow_clients(service_bundles, idle=400, slowloris=20, header_timeout_s=1.0,
                                          seconds=3.0, processes=2, work=tmp_path)
    print(json.dumps(result))
    assert result["idle_opened"] == 400 and result["idle_closed"] == 400
    assert result["slowloris_still_open"] == 0
    assert result["passed"], result


# --- the Open Inference Protocol parses within the service's limits -----------------------------

def v2_error(r: httpx.Response, status: int) -> str:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and isinstance(body["error"], str)
    return body["error"]


def test_v2_declared_shape_is_checked_against_the_limits_before_anything_is_built(service_bundles):
    """The issue's 160 bytes, 2 million rows of nothing, are refused with little memory and as
    fast as the same body declaring one row (the best of 3 within 5x their median; a 0.5 s
    bound failed at 0.81 s on a busy machine, tracemalloc on): the work does not grow with the
    rows declared."""
    import statistics
    import tracemalloc

    async def scenario():
        async with running_app(settings(service_bundles)) as (app, client):
            url = "/v2/models/fever/infer"

            async def refused(rows: int) -> float:
                started = time.perf_counter()
                r = await client.post(url, json=v2_verify_body(["x"], [1], [rows, 0], []))
                assert r.status_code in (400, 422), r.text
                return time.perf_counter() - started

            tracemalloc.start()
            one_row = [await refused(1) for _ in range(3)]
            tracemalloc.reset_peak()
            many_rows = [await refused(2_000_000)]
            _, peak = tracemalloc.get_traced_memory()
            many_rows += [await refused(2_000_000) for _ in range(2)]
            tracemalloc.stop()
            assert peak < 5 * 2**20, peak
            assert min(many_rows) < 5 * statistics.median(one_row), (many_rows, one_row)
            r = await client.post(url, json=v2_verify_body(["x"], [1], [20_000_000, 0], []))
            assert r.status_code in (400, 422)
            # k = 0 even with rows that agree: no claim without evidence
            assert "k >= 1" in v2_error(await client.post(url, json=v2_verify_body(["x"], [1], [1, 0], [])), 400)
            # rows over max_inputs_per_request (64) and k over the model's max_evidence (5): the
            # task API's statuses, before the data is read (none is sent)
            message = v2_error(await client.post(url, json=v2_verify_body([], [65], [65, 1], [])), 422)
            assert "at most 64 per request (limit set by ATTSERVE_MAX_INPUTS_PER_REQUEST)" in message
            message = v2_error(await client.post(url, json=v2_verify_body(["x"], [1], [1, 6], [])), 422)
            assert "at most 5 (its max_evidence" in message and "no ATTSERVE_ setting raises it" in message
            # within the limits the same request shapes still run
            r = await client.post(url, json=v2_verify_body(["a dog runs"], [1], [1, 2], ["a dog runs fast", ""]))
            assert r.status_code == 200, r.text
    asyncio.run(scenario())


def test_v2_parse_failures_are_short_400s_in_the_protocols_form(service_bundles, caplog):
    import logging

    caplog.set_level(logging.WARNING)
    async def scenario():
        async with running_app(settings(service_bundles)) as (app, client):
            out = {}
            for kind, (suffix, body, headers) in v2_bad_bodies().items():
                r = await client.post(f"/v2/models/fever{suffix}/infer", content=body,
                                      headers={"content-type": "application/json", **headers})
                out[kind] = (r.status_code, r.json())
            return out
    answers = asyncio.run(scenario())
    for kind, (status, body) in answers.items():
        assert status == (404 if kind == "long_version" else 400), (kind, status, body)
        assert set(body) == {"error"} and isinstance(body["error"], str), kind
        assert len(body["error"]) < 300 and "\x1b" not in body["error"], (kind, body["error"][:400])
    assert "recursion limit" in answers["nested"][1]["error"]
    assert "(500001 characters)" in answers["long_name"][1]["error"]
    assert "and 198 more" in answers["many_names"][1]["error"]
    assert [r for r in caplog.records if r.levelname == "ERROR"] == []


# --- explanation answers are bounded -------------------------------------------------------------

def test_explanations_describe_the_kept_tokens_and_count_the_cut_ones(service_bundles):
    async def scenario():
        async with running_app(settings(service_bundles)) as (app, client):
            # the 256 KB request: 64 texts of 4,096 "!" (max length 32 tokens here)
            r = await client.post("/classify", content=explain_flood_body("sentiment"),
                                  headers={"content-type": "application/json"})
            assert r.status_code == 200, r.text[:300]
            answers = r.json()["results"]
            assert len(r.content) < 1_000_000, len(r.content)  # 16 MB when every token was described
            for answer in answers:
                assert len(answer["explanation"]["tokens"]["text"]) == 32
                assert answer["explanation"]["cut_tokens"] == {"text": 4096 - 32}
            r = await client.post("/verify", json={"claim": "a dog runs", "evidence": ["a dog runs . " * 20, "ok"],
                                                   "explain": True})
            assert r.json()["explanation"]["cut_tokens"] == {"claim": 0, "evidence": [80 - 20, 0]}
    asyncio.run(scenario())


def test_an_answer_over_max_answer_bytes_is_422_naming_the_setting(service_bundles):
    async def scenario():
        async with running_app(settings(service_bundles, max_answer_bytes=4_000)) as (app, client):
            inputs = [{"premise": "a man is playing a guitar on the stage .", "hypothesis": "a man plays"}] * 8
            plain = await client.post("/entailment", json={"inputs": inputs})
            explained = await client.post("/entailment", json={"inputs": inputs, "explain": True})
            return plain, explained
    plain, explained = asyncio.run(scenario())
    assert plain.status_code == 200 and len(plain.content) < 4_000
    message = error_of(explained, 422, "answer_too_large")
    assert "over 4000 (limit set by ATTSERVE_MAX_ANSWER_BYTES)" in message and "explain" in message


# --- an answer nobody reads is dropped at the write timeout ----------------------------------------

def test_an_answer_that_is_not_read_is_dropped_at_the_write_timeout(guarded_server):
    # a client that reads nothing; its answer (~590 KB, 64 explanations) is far more than the
    # socket buffers hold
    request = http_request("POST", "/classify", explain_flood_body("sentiment"),
                                       {"content-type": "application/json"})
    with unread_connection(guarded_server.port, request) as sock:
        time.sleep(3.0)  # answered in ~1 s, then 0.5 s without progress
        sock.setblocking(True)
        raw, _ = read_until_closed(sock, 3)  # before the fix: the whole answer, still open
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
    assert length > 500_000 and len(body) < length / 2, (length, len(body))
    # a client that reads gets the same answer in full
    r = httpx.post(guarded_server.base + "/classify", content=explain_flood_body("sentiment"),
                   headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == 200 and len(r.content) == length


# --- the connection closes after a 413 --------------------------------------------------------------

@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_413_closes_the_connection_however_slowly_the_body_comes(guarded_server, chunked):
    with socket.create_connection(("127.0.0.1", guarded_server.port)) as sock:
        if chunked:  # a body streamed past the 1 MiB limit, then trickled
            sock.sendall(b"POST /classify HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked\r\n"
                         b"content-type: application/json\r\n\r\n" + b"100000\r\n" + b"x" * 0x100000 + b"\r\n")
            sock.sendall(b"10\r\n" + b"x" * 16 + b"\r\n")
        else:  # the repro: a Content-Length over the limit, then one byte at a time
            sock.sendall(b"POST /classify HTTP/1.1\r\nHost: a\r\nContent-Length: 2000000\r\n\r\n")
        started, data = time.monotonic(), b""
        sock.settimeout(0.2)
        while time.monotonic() - started < 4:
            try:
                sock.sendall(b"1\r\nx\r\n" if chunked else b"x")
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
            except socket.timeout:
                continue
            except (BrokenPipeError, ConnectionResetError):
                break
        closed_after = time.monotonic() - started
    status, body = json_error(data)
    assert status == 413 and body["error"]["code"] == "body_too_large"
    assert data.count(b"HTTP/1.1") == 1  # no 431 for the body's rest taken as headers
    assert closed_after < 1.0, closed_after


# --- optional API keys ----------------------------------------------------------------------------

KEY = "test-key-0123456789abcdef"
NLI_INFER = {"inputs": [{"name": "premise", "shape": [1], "datatype": "BYTES", "data": ["a man sleeps"]},
                        {"name": "hypothesis", "shape": [1], "datatype": "BYTES", "data": ["a man"]}]}
# one request for every route of the app (the test fails when a route is added without one)
ROUTE_REQUESTS = {
    "/openapi.json": ("GET", "/openapi.json", None), "/docs": ("GET", "/docs", None),
    "/docs/oauth2-redirect": ("GET", "/docs/oauth2-redirect", None), "/redoc": ("GET", "/redoc", None),
    # every task's endpoint, with its example (core.tasks)
    **{task.endpoint: ("POST", task.endpoint, task.example) for task in TASKS.values()},
    "/tokenize": ("POST", "/tokenize", {"text": "a fine day"}),
    "/zero-shot": ("POST", "/zero-shot", {"text": "a fine day", "candidate_labels": ["weather", "sport"]}),
    "/predict": ("POST", "/predict", {"inputs": "a fine day"}),
    "/": ("GET", "/", None), "/v1/models": ("GET", "/v1/models", None), "/metrics": ("GET", "/metrics", None),
    "/health/live": ("GET", "/health/live", None), "/health/ready": ("GET", "/health/ready", None),
    "/v2": ("GET", "/v2", None), "/v2/health/live": ("GET", "/v2/health/live", None),
    "/v2/health/ready": ("GET", "/v2/health/ready", None),
    "/v2/models/{name}": ("GET", "/v2/models/nli", None),
    "/v2/models/{name}/versions/{version}": ("GET", "/v2/models/nli/versions/test-1", None),
    "/v2/models/{name}/ready": ("GET", "/v2/models/nli/ready", None),
    "/v2/models/{name}/versions/{version}/ready": ("GET", "/v2/models/nli/versions/test-1/ready", None),
    "/v2/models/{name}/infer": ("POST", "/v2/models/nli/infer", NLI_INFER),
    "/v2/models/{name}/versions/{version}/infer": ("POST", "/v2/models/nli/versions/test-1/infer", NLI_INFER),
    "/v2/models/{name}/config": ("GET", "/v2/models/nli/config", None),
    "/v2/models/{name}/versions/{version}/config": ("GET", "/v2/models/nli/versions/test-1/config", None),
    "/ui": ("GET", "/ui", None), "/ui/{path}": ("GET", "/ui/ui.js", None),
}
HEALTH = {"/health/live", "/health/ready", "/v2/health/live", "/v2/health/ready"}


def route_paths(routes) -> set[str]:
    out = set()
    for route in routes:
        if hasattr(route, "original_router"):  # an included router
            out |= route_paths(route.original_router.routes)
        else:
            out.add(route.path + ("/{path}" if type(route).__name__ == "Mount" else ""))
    return out


@pytest.mark.parametrize("metrics_require_key", [False, True])
def test_with_api_keys_every_route_but_health_needs_one(service_bundles, caplog, metrics_require_key):
    import logging

    caplog.set_level(logging.DEBUG)
    async def scenario():
        keys = f"{KEY},other-key-0123456789abcdef"
        async with running_app(settings(service_bundles, api_keys=keys, docs=True,
                                        metrics_require_key=metrics_require_key)) as (app, client):
            assert route_paths(app.routes) == set(ROUTE_REQUESTS)
            out = {}
            for route, (method, url, body) in ROUTE_REQUESTS.items():
                answers = []
                for headers in ({}, {"authorization": "Bearer wrong-key-0123456789abcdef"},
                                {"authorization": f"Basic {KEY}"}, {"authorization": f"Bearer {KEY}"},
                                {"authorization": "bearer other-key-0123456789abcdef"}):
                    r = await client.request(method, url, json=body, headers=headers)
                    answers.append(r)
                out[route] = answers
            served = {m["task"] for m in (await client.get("/v1/models", headers={"authorization": f"Bearer {KEY}"})).json()["models"]}
            return out, served
    answers, served = asyncio.run(scenario())
    # past the key, a task none of the test bundles serves (rerank, paraphrase) is a 404
    unserved = {task.endpoint: 404 for task in TASKS.values() if task.name not in served}
    for route, (none, wrong, basic, good, other) in answers.items():
        # /ui redirects to the page at /ui/
        ok = {"/ui": 307, **unserved}.get(route, 200)
        assert good.status_code == other.status_code == ok, (route, good.text[:200])
        if route in HEALTH or (route == "/metrics" and not metrics_require_key):
            assert none.status_code == ok, route
            continue
        for r in (none, wrong, basic):
            assert r.status_code == 401, (route, r.status_code)
            assert r.headers["www-authenticate"].startswith('Bearer realm="attserve"')
            assert r.headers["connection"] == "close"
            body = r.json()
            # the protocols' own shapes: a string under /v2, TEI's {"error", "error_type", "code"} on /predict
            message = body["error"] if isinstance(body["error"], str) else body["error"]["message"]
            assert "wrong-key" not in message and KEY not in message
            if not route.startswith("/v2"):
                assert (body["code"] if isinstance(body["error"], str) else body["error"]["code"]) == "unauthorized"
        assert 'error="invalid_token"' in wrong.headers["www-authenticate"]
    logged = "\n".join(r.getMessage() + str(r.__dict__) for r in caplog.records)
    assert KEY not in logged and "wrong-key" not in logged


def test_api_keys_come_from_a_file_and_are_never_shown(tmp_path):
    from pydantic import ValidationError

    keys = tmp_path / "keys"
    keys.write_text(f"# one per line\n{KEY}\n\nsecond-key-0123456789abcdef\n")
    loaded = Settings(api_keys_file=keys)
    assert [k.get_secret_value() for k in loaded.api_keys] == [KEY, "second-key-0123456789abcdef"]
    assert KEY not in repr(loaded) and KEY not in str(loaded.model_dump())
    for bad in ({"api_keys": "short-key"}, {"api_keys_file": tmp_path / "missing"}):
        with pytest.raises(ValidationError) as caught:
            Settings(**bad)
        assert "short-key" not in str(caught.value)
    keys.write_text("# no key here\n\n")
    with pytest.raises(ValidationError, match="holds no key"):
        Settings(api_keys_file=keys)


# --- Host allow-list, /v2 media types -----------------------------------------------------------

def test_a_host_outside_the_allow_list_is_400_but_health_stays_open(service_bundles):
    async def scenario():
        async with running_app(settings(service_bundles, allowed_hosts="localhost, *.example.org,[::1]")) as (app, client):
            out = {}
            for host in ("localhost", "localhost:8000", "api.example.org", "[::1]:8000", "evil.example.com",
                         "example.org", "127.0.0.1", "localhost.evil.com"):
                out[host] = (await client.post("/classify", json={"text": "a fine day"}, headers={"host": host}),
                             await client.get("/v2", headers={"host": host}),
                             await client.get("/health/ready", headers={"host": host}),
                             await client.get("/metrics", headers={"host": host}))
            return out
    answers = asyncio.run(scenario())
    for host, (classify, v2, health, metrics) in answers.items():
        assert health.status_code == metrics.status_code == 200, host
        if host in ("localhost", "localhost:8000", "api.example.org", "[::1]:8000"):
            assert classify.status_code == v2.status_code == 200, host
            continue
        message = error_of(classify, 400, "invalid_host")
        assert ascii(host.split(":")[0]) in message and "ATTSERVE_ALLOWED_HOSTS" in message
        assert v2.status_code == 400 and set(v2.json()) == {"error"}


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x", "text/plain; charset=utf-8"])
def test_v2_infer_refuses_the_content_types_a_web_page_sends_without_preflight(service_bundles, content_type):
    async def scenario():
        async with running_app(settings(service_bundles)) as (app, client):
            body = json.dumps(NLI_INFER).encode()
            refused = await client.post("/v2/models/nli/infer", content=body, headers={"content-type": content_type})
            accepted = [await client.post("/v2/models/nli/infer", content=body, headers=headers)
                        for headers in ({"content-type": "application/json; charset=utf-8"},
                                        {"content-type": "application/octet-stream"}, {})]
            return refused, accepted
    refused, accepted = asyncio.run(scenario())
    assert "application/json" in v2_error(refused, 415)
    assert [r.status_code for r in accepted] == [200, 200, 200]


# --- memory freed by a burst goes back to the OS ----------------------------------------------------

def test_memory_a_burst_freed_is_handed_back_to_the_os(service_bundles, tmp_path):
    """glibc keeps what a burst of explanation requests freed inside its heaps (RSS stayed
    ~400 MB up after 16 of them); the service trims it every ATTSERVE_MEMORY_TRIM_S."""
    body = explain_flood_body("sentiment")

    async def burst(base: str) -> list[int]:
        async with httpx.AsyncClient(base_url=base, timeout=60) as client:
            answers = await asyncio.gather(*(client.post("/classify", content=body, headers={
                "content-type": "application/json"}) for _ in range(12)))
            return [r.status_code for r in answers]

    growth = {}
    for trim_s in (0, 0.5):  # 0: never (what the service did before)
        server = ServiceProcess(service_bundles, tmp_path / f"trim-{trim_s}.log", memory_trim_s=trim_s)
        with server.start():
            time.sleep(1.0)
            idle = server.rss_bytes()
            assert asyncio.run(burst(server.base)) == [200] * 12
            time.sleep(2.0)
            growth[trim_s] = (server.rss_bytes() - idle) / 2**20
    assert growth[0.5] < 100 and growth[0] > 2 * growth[0.5], growth


# --- the probes and the abuse mix at CI size (full size: python -m bench.reliability probes / abuse)

def test_probes_short(service_bundles, tmp_path):
    result = run_probes(service_bundles, tmp_path, unread_clients=8, write_timeout_s=1)
    print(json.dumps(result))
    probes = result["probes"]
    assert probes["1 /v2 shape [20000000, 0]"]["status"] == 400
    assert probes["7 413 then one byte every 2 s"]["closed_after_s"] < 1.0
    assert probes["5 weights in an external data file"]["refused"] is True
    assert probes["2 8 clients never read their explanation"]["all_dropped_after_s"] is not None
    assert result["passed"], result


def test_abuse_short(service_bundles, tmp_path):
    # few explanation requests (each is ~0.4 s of a core to tokenize, more on a busy machine) and
    # a settle long enough for the server to finish them before RSS is compared with idle
    result = run_abuse(service_bundles, seconds=6, settle_s=8, unread=2, slow=6, work=tmp_path,
                                   write_timeout_s=1, memory_trim_s=1)
    print(json.dumps({k: v for k, v in result.items() if k != "rss_samples"}))
    statuses = result["statuses"]
    assert set(statuses["v2_bad"]) <= {"400", "404"} and set(statuses["junk"]) <= {"0", "400", "408"}
    assert result["normal_statuses"] == {"200": result["normal_statuses"]["200"]}
    assert result["passed"], result


# --- third review: bounded work before anything runs, early refusals, echoes, Host --------------

def test_unknown_fields_cost_little_and_too_many_are_refused_at_once(service_bundles):
    from service.http.schemas import MAX_UNKNOWN_FIELDS

    many = {"text": "hi", **{str(i): 0 for i in range(40_000)}}  # the review's 356 KB body: 9.7 s before
    allowed = {"text": "hi", **{f"meta{i}": i for i in range(MAX_UNKNOWN_FIELDS)}}
    batch = {"inputs": [{"text": "a b", **{f"k{i}_{j}": 0 for j in range(MAX_UNKNOWN_FIELDS)}} for i in range(64)]}

    async def scenario():
        async with running_app(settings(service_bundles)) as (app, client):
            out = {}
            for name, body in (("many", many), ("many_near_miss", {**many, "modle": "x"}), ("allowed", allowed),
                               ("batch", batch), ("batch_near_miss", {**batch, "modle": "x"})):
                started = time.perf_counter()
                out[name] = (await client.post("/classify", json=body), time.perf_counter() - started)
            return out
    out = asyncio.run(scenario())
    for name, unknown in (("many", 40_000), ("many_near_miss", 40_001)):
        response, seconds = out[name]
        message = error_of(response, 422, "invalid_input")
        assert f"body: {unknown} unknown fields; at most {MAX_UNKNOWN_FIELDS} per object" in message, message
        assert seconds < 1.0, (name, seconds)
    response, _ = out["allowed"]
    assert response.status_code == 200
    assert response.headers["x-attserve-ignored-fields"].endswith(f"and {MAX_UNKNOWN_FIELDS - 10} more")
    response, seconds = out["batch"]
    assert response.status_code == 200 and len(response.json()["results"]) == 64 and seconds < 5.0
    assert "did you mean 'model'" in error_of(out["batch_near_miss"][0], 422, "invalid_input")


def test_a_field_name_or_path_is_never_echoed_past_40_characters(service_bundles):
    long_name = "model" + "_" * 300_000
    path = "/" + "\u202e" + "x" * 15_000

    async def scenario():
        async with running_app(settings(service_bundles)) as (app, client):
            near_miss = await client.post("/classify", json={"text": "hi", "model\u202e": 1})
            ignored = await client.post("/classify", json={"text": "hi", long_name: 1})
            missing = await client.get(path)
            wrong_method = await client.put("/classify", json={})
            return near_miss, ignored, missing, wrong_method
    near_miss, ignored, missing, wrong_method = asyncio.run(scenario())
    # a name 60,000 times longer than any field cannot be a near miss: ignored, named cut in the header
    assert ignored.status_code == 200 and len(ignored.headers["x-attserve-ignored-fields"]) <= 40
    message = error_of(near_miss, 422, "invalid_input")
    assert "\u202e" not in message and "\\u202e" in message and len(message) < 600, message
    message = error_of(missing, 404, "not_found")
    assert "\u202e" not in message and "(15002 characters)" in message and len(missing.content) < 2_000
    assert wrong_method.status_code == 405


def test_an_explanation_too_large_is_refused_before_inference(service_bundles, monkeypatch):
    from service.inference.runtime import ModelRuntime

    runs = []
    run = ModelRuntime.run

    def counted(self, *args, **kwargs):
        runs.append(self.name)
        return run(self, *args, **kwargs)

    monkeypatch.setattr(ModelRuntime, "run", counted)
    claim = " ".join(f"w{i}" for i in range(16))
    sentence = " ".join(f"v{i}" for i in range(20))
    body = {"inputs": [{"claim": claim, "evidence": [sentence] * 5}] * 64, "explain": True, "model": "fever"}

    async def scenario():
        async with running_app(settings(service_bundles, max_answer_bytes=200_000)) as (app, client):
            runs.clear()
            refused = await client.post("/verify", json=body)
            refused_runs = list(runs)
            small = await client.post("/verify", json={**body, "inputs": body["inputs"][:2]})
            return refused, refused_runs, small
    refused, refused_runs, small = asyncio.run(scenario())
    message = error_of(refused, 422, "answer_too_large")
    assert "at least" in message and "(limit set by ATTSERVE_MAX_ANSWER_BYTES)" in message
    assert refused_runs == []  # nothing was computed for it
    # the floor is a floor: the answer the same request gets with fewer inputs is larger per input
    assert small.status_code == 200
    floor = int(message.split("at least ")[1].split()[0])
    assert len(small.content) / 2 > floor / 64 > 0


def test_a_trailing_slash_redirect_is_relative_whatever_the_host(service_bundles):
    async def scenario():
        async with running_app(settings(service_bundles)) as (app, client):
            return [await client.get(path, headers={"host": "evil.example"})
                    for path in ("/v1/models/", "/v1/models/?x=1", "/health/live/", "/nothing/")]
    models, query, live, nothing = asyncio.run(scenario())
    assert (models.status_code, models.headers["location"]) == (307, "/v1/models")
    assert (query.status_code, query.headers["location"]) == (307, "/v1/models?x=1")
    assert (live.status_code, live.headers["location"]) == (307, "/health/live")
    assert nothing.status_code == 404 and "location" not in nothing.headers


@pytest.mark.parametrize("host", ["localhost:evil", "localhost:1@evil.com", "localhost:99999", "localhost :80",
                                  "evil@localhost", "[::1]x"])
def test_a_host_header_is_checked_whole(service_bundles, host):
    async def scenario():
        async with running_app(settings(service_bundles, allowed_hosts="localhost,[::1]")) as (app, client):
            return (await client.post("/classify", json={"text": "a fine day"}, headers={"host": host}),
                    await client.get("/v1/models", headers={"host": host}),
                    await client.get("/v1/models", headers={"host": "localhost:8000"}))
    classify, models, fine = asyncio.run(scenario())
    error_of(classify, 400, "invalid_host")
    error_of(models, 400, "invalid_host")
    assert fine.status_code == 200


@pytest.fixture(scope="module")
def host_checked_server(service_bundles, tmp_path_factory):
    log = tmp_path_factory.mktemp("hosts") / "service.log"
    server = ServiceProcess(service_bundles, log, allowed_hosts="localhost")
    with server.start(ready=False):
        yield server


def exchange(port: int, raw: bytes, timeout_s: float = 5.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(raw)
        data, _ = read_until_closed(sock, timeout_s)
    return data


def test_the_request_lines_authority_wins_over_host(host_checked_server):
    def line(target: str, host: str) -> bytes:
        return f"GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()

    evil = exchange(host_checked_server.port, line("http://evil.com/v1/models", "localhost"))
    assert json_error(evil)[0] == 400 and json_error(evil)[1]["error"]["code"] == "invalid_host"
    userinfo = exchange(host_checked_server.port, line("http://user@localhost/v1/models", "localhost"))
    assert json_error(userinfo) == (400, {"error": {"code": "bad_request", "message": ANY_MESSAGE}})
    fine = exchange(host_checked_server.port, line("http://localhost:1234/v1/models", "evil.com"))
    assert fine.startswith(b"HTTP/1.1 200")


class _AnyMessage(str):
    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and 0 < len(other) <= 200


ANY_MESSAGE = _AnyMessage()


@pytest.mark.parametrize("follower", [b"BOGUS\x00 / HTTP/1.1\r\n\r\n",
                                      b"GET /health/live HTTP/1.1\r\nhost: a\r\nx-big: " + b"a" * 20_000 + b"\r\n\r\n",
                                      b"garbage past the content-length"],
                         ids=["bad-request-line", "huge-header", "body-past-content-length"])
def test_a_bad_pipelined_follower_is_answered_after_the_request_before_it(guarded_server, follower):
    body = json.dumps({"text": "a fine day"}).encode()
    first = http_request("POST", "/classify", body, {"content-type": "application/json"})
    data = exchange(guarded_server.port, first + follower)
    answers = data.split(b"HTTP/1.1 ")[1:]
    assert len(answers) == 2, data[:500]
    assert answers[0].startswith(b"200") and b'"label"' in answers[0]
    assert answers[1][:3] in (b"400", b"431")


def _largest_json_body() -> bytes:
    """A valid JSON object just under the 1 MiB body limit, of many short fields: parsing it is
    the most work the limits let a body put on the event loop (the service parses there)."""
    body = json.dumps({"text": "hi", **{str(i): 0 for i in range(88_000)}}).encode()
    assert (1 << 20) - 20_000 < len(body) <= 1 << 20, len(body)
    return body


def _cpu_wait_s(pid: int) -> float:
    """Seconds the process's main thread (the service's event loop) has spent runnable but
    waiting for a CPU (Linux's /proc schedstat): the share of a probe's wait that is the
    machine's load, not the loop's own work."""
    return int(Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()[1]) / 1e9


def test_no_request_the_limits_allow_stalls_the_event_loop(guarded_server):
    """The heaviest requests the limits let through, 3 rounds of each, sent while /health/live
    is probed on another connection: no probe waits, less the time the loop's thread waited for
    a CPU meanwhile, 3x longer than the CPU time this process takes to parse the largest JSON
    body allowed (one outlier forgiven: a request that blocks the loop does so in each round).
    The service parses bodies on the loop: its worst, the 1 MiB body, costs the loop about one
    such parse (40-46 ms of CPU each here). Neither side grows with the machine's load, where a
    wall-clock bound did: 100 ms failed at 109 ms on an idle 2-core CI machine, and waits reach
    600 ms at load 10 on 2 cores. At load 7 here the longest such waits were 47-52 ms against a
    bound of 141 ms, and 500 ms with a time.sleep(0.5) or 0.5 s of CPU planted in the task route."""
    import statistics
    import threading

    if not Path(f"/proc/{guarded_server.proc.pid}/task/{guarded_server.proc.pid}/schedstat").exists():
        pytest.skip("needs Linux's /proc/<pid>/task/<tid>/schedstat (how long a thread waited for a CPU)")
    rounds = 3
    heavy = [
        json.dumps({"text": "hi", **{str(i): 0 for i in range(110_000)}}).encode()[: (1 << 20) - 100] + b"}",
        json.dumps({"text": "hi", **{str(i): 0 for i in range(40_000)}}).encode(),
        explain_flood_body("sentiment"),
        json.dumps({"inputs": [{"claim": " ".join(["w"] * 16), "evidence": [" ".join(["v"] * 20)] * 5}] * 64,
                    "explain": True, "model": "fever"}).encode(),
    ]
    reference = _largest_json_body()
    parses = []
    for _ in range(5):
        started = time.thread_time()
        json.loads(reference)
        parses.append(time.thread_time() - started)
    done = threading.Event()
    statuses = []

    def send_heavy():
        try:
            with httpx.Client(base_url=guarded_server.base, timeout=30) as client:
                for _ in range(rounds):
                    for body in heavy:
                        statuses.append(client.post("/verify" if b"claim" in body else "/classify", content=body,
                                                    headers={"content-type": "application/json"}).status_code)
        finally:
            done.set()

    pid = guarded_server.proc.pid
    waits = []  # (the probe's wait, the loop thread's wait for a CPU meanwhile)
    with httpx.Client(base_url=guarded_server.base, timeout=30) as probe:
        probe.get("/health/live")
        sender = threading.Thread(target=send_heavy)
        sender.start()
        while not done.is_set():
            queued, started = _cpu_wait_s(pid), time.perf_counter()
            assert probe.get("/health/live").status_code == 200
            waits.append((time.perf_counter() - started, _cpu_wait_s(pid) - queued))
            time.sleep(0.005)
        sender.join()
    assert set(statuses) <= {200, 422} and 200 in statuses and len(statuses) == rounds * len(heavy), statuses
    bound = 3 * statistics.median(parses)
    own = sorted(waits, key=lambda w: w[0] - w[1])[-5:]
    assert len(waits) >= 2 and own[-2][0] - own[-2][1] < bound, (
        f"/health/live waited {[(round(w * 1000), round(q * 1000)) for w, q in own]} ms (the 5 longest less the "
        f"loop's wait for a CPU, with that wait), over {bound * 1000:.0f} ms: 3x a parse of the largest body")


def test_the_suite_has_a_per_test_timeout(pytestconfig):
    """A hang (a stalled socket, a wait without its own bound) fails its test instead of
    waiting for CI's 90 minutes; the bound stays above the slowest honest test. A test's own
    waits should fail sooner (a batcher that ignored its delay hung one for 600 s)."""
    assert 120 <= float(pytestconfig.getini("timeout")) <= 900
