"""R10 probes: the second security review's findings, one probe each, against a real server."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

import httpx

from bench.harness import RssSampler, ServiceProcess
from bench.loadgen import run_async
from bench.reliability.workload import ModelSpec, repository_models
from core.bundle import CONFIG_FILE


# The findings of the second security review, each as a probe against a real server, and a
# mixed abuse run. The requests are built here once; tests/process/test_hardening.py sends the same ones.

PROBE_KEY = "reliability-probe-key-0123456789"  # the probes' server asks for API keys
MB = 2**20


def http_request(method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None,
                 host: str = "127.0.0.1") -> bytes:
    """One raw HTTP/1.1 request (Content-Length from the body unless a header says otherwise)."""
    head = {"host": host, **({"content-length": str(len(body))} if body else {}), **(headers or {})}
    lines = "".join(f"{k}: {v}\r\n" for k, v in head.items())
    return f"{method} {path} HTTP/1.1\r\n{lines}\r\n".encode() + body


def explain_flood_body(model: str | None = None) -> bytes:
    """The review's explanation request: 256 KB, 64 texts of 4,096 "!" with "explain": true
    (an 18 MB answer when every token was described)."""
    body = {"inputs": [{"text": "!" * 4096}] * 64, "explain": True}
    return json.dumps({**body, "model": model} if model else body).encode()


def v2_verify_body(claims: list, claim_shape: list, evidence_shape: list, evidence: list) -> dict:
    return {"inputs": [{"name": "claim", "shape": claim_shape, "datatype": "BYTES", "data": claims},
                       {"name": "evidence", "shape": evidence_shape, "datatype": "BYTES", "data": evidence}]}


def v2_bad_bodies() -> dict[str, tuple[str, bytes, dict[str, str]]]:
    """/v2 bodies a verification model must refuse with a short 400 (404 for the version):
    name -> (path suffix after the model name, body, extra headers)."""
    claim = {"name": "claim", "shape": [1], "datatype": "BYTES", "data": ["a dog runs"]}
    evidence = {"name": "evidence", "shape": [1, 1], "datatype": "BYTES", "data": ["a dog runs fast"]}
    pair = json.dumps({"inputs": [claim, evidence]}).encode()
    alone = json.dumps({"inputs": [claim]}).encode()
    big = "9" * 5000
    external = {**evidence, "data": None, "parameters": {"binary_data_size": 7}}
    return {
        "nested": ("", b"[" * 100_000 + b"]" * 100_000, {}),
        "nested_data": ("", alone.replace(b'["a dog runs"]', b"[" * 50_000 + b"]" * 50_000), {}),
        "big_int_shape": ("", pair.replace(b"[1, 1]", f"[{big}, 1]".encode()), {}),
        "big_int_data": ("", alone.replace(b'["a dog runs"]', f"[{big}]".encode()), {}),
        "big_int_binary_size": ("", json.dumps({"inputs": [claim, external]}).encode().replace(
            b'"binary_data_size": 7', f'"binary_data_size": 1{"0" * 4000}'.encode()), {}),
        "long_shape": ("", json.dumps({"inputs": [claim, {**evidence, "shape": [10] * 5000}]}).encode(), {}),
        "negative_shape": ("", json.dumps({"inputs": [claim, {**evidence, "shape": [-1, 1]}]}).encode(), {}),
        "long_name": ("", json.dumps({"inputs": [claim, {**evidence, "name": "\x1b" + "e" * 500_000}]}).encode(), {}),
        "many_names": ("", json.dumps({"inputs": [{**claim, "name": "n" * 1000}] * 200}).encode(), {}),
        "long_key": ("", json.dumps({"inputs": [claim, {**evidence, "k" * 500_000: 1}]}).encode(), {}),
        "long_datatype": ("", json.dumps({"inputs": [claim, {**evidence, "datatype": "B" * 500_000}]}).encode(), {}),
        "long_output": ("", json.dumps({"inputs": [claim, evidence], "outputs": [{"name": "o" * 500_000}]}).encode(), {}),
        "header_length": ("", pair, {"inference-header-content-length": "9" * 5000}),
        "not_utf8": ("", b'{"inputs": [\xff\xfe]}', {}),
        "long_version": ("/versions/" + "v" * 6000, pair, {}),
    }


def huge_shape_body() -> bytes:
    """The review's HIGH finding: 160 bytes declaring 20 million evidence rows of nothing."""
    return json.dumps(v2_verify_body(["x"], [1], [20_000_000, 0], [])).encode()


def open_sockets(pid: int) -> int:
    """Sockets a process holds (its connections and listeners), from /proc (Linux)."""
    fds = Path(f"/proc/{pid}/fd")
    count = 0
    for fd in fds.iterdir():
        try:
            count += os.readlink(fd).startswith("socket:")
        except OSError:
            pass
    return count


async def exchange(port: int, request: bytes, *, trickle: bytes = b"", every_s: float = 1.0,
                   hold_s: float = 5.0) -> dict:
    """Send `request` (then `trickle` every `every_s`) and read until the server closes or
    `hold_s` passes: the status of the first answer, when it came and when the connection
    closed (None: still open), how many answers."""
    start = time.monotonic()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=2**24)
    except OSError as exc:
        return {"status": 0, "error": type(exc).__name__, "seconds": 0.0, "closed_after_s": 0.0, "answers": 0}
    status, first, data, closed = 0, None, b"", None
    try:
        writer.write(request)
        next_trickle = time.monotonic() + every_s
        while time.monotonic() - start < hold_s:
            if trickle and time.monotonic() >= next_trickle:
                writer.write(trickle)
                next_trickle += every_s
            try:
                chunk = await asyncio.wait_for(reader.read(1 << 20), timeout=0.05)
            except asyncio.TimeoutError:
                continue
            if not chunk:
                closed = time.monotonic() - start
                break
            if first is None:
                first = time.monotonic() - start
                status = int(chunk.split(b" ", 2)[1]) if chunk.startswith(b"HTTP/1.") else 0
            data += chunk
    except OSError:
        closed = time.monotonic() - start
    finally:
        writer.close()
    return {"status": status, "seconds": first, "closed_after_s": closed, "answers": data.count(b"HTTP/1.1 "),
            "bytes": len(data), "body": data.partition(b"\r\n\r\n")[2][:600].decode("utf-8", "replace")}


def unread_connection(port: int, request: bytes) -> socket.socket:
    """A connection that sends `request` and never reads (a receive buffer of a few KB)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.setblocking(False)
    try:
        sock.sendall(request)
    except BlockingIOError:  # the server is reading slowly: send the rest blocking
        sock.setblocking(True)
        sock.sendall(request)
    return sock


def _models_of(repository: Path) -> tuple[ModelSpec, ModelSpec]:
    models = repository_models(repository)
    verification = next(m for m in models if m.task == "verification")
    classification = next(m for m in models if m.task == "classification")
    return verification, classification


def run_probes(repository: Path, work: Path = Path("runs/reliability"), unread_clients: int = 40,
               **settings: Any) -> dict:
    """The review's findings, one probe each, against one server with API keys and a Host
    allow-list: every answer a 4xx within 1 s (the unread explanations: connections the
    server drops at its write timeout), server RSS +50 MB at most per probe, no ERROR logged."""
    verification, classification = _models_of(repository)
    # closed after each answer, except where the server must close by itself (7)
    auth = {"authorization": f"Bearer {PROBE_KEY}", "content-type": "application/json", "connection": "close"}
    server = ServiceProcess(repository, work / "probes.log", api_keys=PROBE_KEY, allowed_hosts="127.0.0.1,localhost",
                            **settings)
    v2 = f"/v2/models/{verification.name}"
    probes: dict[str, Any] = {
        "1 /v2 shape [20000000, 0]": lambda: exchange(server.port, http_request(
            "POST", f"{v2}/infer", huge_shape_body(), auth)),
        "3 /v2 nesting 100,000 deep": lambda: exchange(server.port, http_request(
            "POST", f"{v2}/infer", v2_bad_bodies()["nested"][1], auth)),
        "3 /v2 integer of 5,000 digits": lambda: exchange(server.port, http_request(
            "POST", f"{v2}/infer", v2_bad_bodies()["big_int_shape"][1], auth)),
        "3 /v2 shape [10]*5000": lambda: exchange(server.port, http_request(
            "POST", f"{v2}/infer", v2_bad_bodies()["long_shape"][1], auth)),
        "4 /v2 input name of 500 KB": lambda: exchange(server.port, http_request(
            "POST", f"{v2}/infer", v2_bad_bodies()["long_name"][1], auth)),
        "6 no API key": lambda: exchange(server.port, http_request(
            "POST", "/classify", b'{"text": "a fine day"}', {"content-type": "application/json", "connection": "close"})),
        "6 foreign Host (DNS rebinding)": lambda: exchange(server.port, http_request(
            "POST", "/classify", b'{"text": "a fine day"}', auth, host="attacker.example")),
        "6 /v2 as text/plain": lambda: exchange(server.port, http_request(
            "POST", f"{v2}/infer", json.dumps(v2_verify_body(["a"], [1], [1, 1], ["b"])).encode(),
            {**auth, "content-type": "text/plain"})),
        "7 413 then one byte every 2 s": lambda: exchange(server.port, http_request(
            "POST", "/classify", headers={**auth, "connection": "keep-alive", "content-length": "2000000"}),
            trickle=b"x", every_s=2.0,
            hold_s=30.0),
    }
    results: dict[str, dict] = {}
    with server.start():
        time.sleep(1.0)
        baseline = server.rss_bytes()

        async def measure(probe: Any) -> tuple[dict, int]:
            with RssSampler(server, 0.02) as sampler:
                outcome = await probe()
            return outcome, max(b for _, b in sampler.samples)

        for name, probe in probes.items():
            before = server.rss_bytes()
            outcome, peak = run_async(measure(probe))
            results[name] = {"status": outcome["status"], "seconds": outcome["seconds"],
                             "closed_after_s": outcome["closed_after_s"], "rss_growth_mb": round((peak - before) / MB, 1),
                             "error": outcome["body"][:160]}
        results[f"2 {unread_clients} clients never read their explanation"] = _unread_explanations_probe(
            server, classification.name, auth, unread_clients)
        errors = [r for r in server.log_records() if r.get("level") == "ERROR"]
        rss_end = server.rss_bytes()
    # 5: external data in a bundle (a start-up check, not a request)
    results["5 weights in an external data file"] = external_data_probe(repository, work)
    timed = {k: v for k, v in results.items() if k[0] in "13467"}
    passed = (all(400 <= v["status"] < 500 and v["seconds"] is not None and v["seconds"] < 1.0
                  and v["rss_growth_mb"] < 50 for v in timed.values())
              and all(v["closed_after_s"] is not None and v["closed_after_s"] < 1.0 for k, v in timed.items() if k[0] == "7")
              and results[f"2 {unread_clients} clients never read their explanation"]["all_dropped_after_s"] is not None
              and results["5 weights in an external data file"]["refused"] is not False and not errors)
    return {"scenario": "probes", "baseline_rss_mb": round(baseline / MB, 1), "end_rss_mb": round(rss_end / MB, 1),
            "probes": results, "error_log_records": len(errors), "passed": passed}


def _unread_explanations_probe(server: ServiceProcess, model: str, auth: dict[str, str], clients: int) -> dict:
    """Probe 2: `clients` connections send an explanation request of `model` and never read; the
    server must drop them all at its write timeout (within 60 s) without its RSS running away."""
    sockets_before, before = open_sockets(server.pid), server.rss_bytes()
    request = http_request("POST", "/classify", explain_flood_body(model), auth)
    started = time.monotonic()
    unread = [unread_connection(server.port, request) for _ in range(clients)]
    peak, dropped_after = before, None
    while time.monotonic() - started < 60:
        peak = max(peak, server.rss_bytes())
        if open_sockets(server.pid) <= sockets_before:
            dropped_after = time.monotonic() - started
            break
        time.sleep(0.2)
    time.sleep(1.0)
    result = {
        "status": None, "answer_bytes": len(httpx.post(server.base + "/classify", content=explain_flood_body(
            model), headers=auth, timeout=60).content),
        "all_dropped_after_s": None if dropped_after is None else round(dropped_after, 1),
        "rss_growth_mb": round((peak - before) / MB, 1), "rss_after_mb": round((server.rss_bytes() - before) / MB, 1)}
    for sock in unread:
        sock.close()
    return result


def external_data_probe(repository: Path, work: Path) -> dict:
    """A bundle of `repository` re-saved with its weights in weights.bin (vouched for by
    config.json), then weights.bin zeroed: refused at load? (needs the `onnx` package)."""
    import hashlib
    import shutil

    try:
        import onnx
    except ModuleNotFoundError:
        return {"refused": None, "why": "the onnx package is not installed"}
    from core.bundle import BundleError, load_bundle

    source = next(p for p in sorted(Path(repository).iterdir()) if (p / CONFIG_FILE).is_file())
    bundle = work / "external-data-bundle"
    shutil.rmtree(bundle, ignore_errors=True)
    shutil.copytree(source, bundle)
    onnx.save_model(onnx.load(bundle / "model.onnx"), bundle / "model.onnx", save_as_external_data=True,
                    all_tensors_to_one_file=True, location="weights.bin", size_threshold=1024)
    config = json.loads((bundle / CONFIG_FILE).read_text())
    config["model_sha256"] = hashlib.sha256((bundle / "model.onnx").read_bytes()).hexdigest()
    (bundle / CONFIG_FILE).write_text(json.dumps(config))
    weights = bundle / "weights.bin"
    weights.write_bytes(bytes(weights.stat().st_size))
    try:
        load_bundle(bundle)
    except BundleError as exc:
        return {"refused": True, "error": str(exc).replace(str(bundle), "<bundle>")[:200]}
    return {"refused": False}
