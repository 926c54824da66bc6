"""R4 graceful shutdown: SIGTERM under load; every accepted request answered, exit in time."""

from __future__ import annotations

import asyncio
import re
import signal
import time
from pathlib import Path

import httpx

from bench import loadgen
from bench.harness import GRACEFUL_EXIT_CODES, ServiceProcess
from bench.loadgen import Outcome, post, run_async
from bench.reliability.workload import WorkloadMaker, answer_problem, answers_of, repository_models
from bench.workloads import ENDPOINT_OF_TASK


# uvicorn logs this when its graceful-shutdown timeout cancels requests still running.
UVICORN_CANCELLED = "timeout graceful shutdown exceeded"
ACCESS_LINE = re.compile(r'"(?P<method>[A-Z]+) (?P<path>\S+) HTTP/[\d.]+" (?P<status>\d{3})')


def _kind(o: Outcome) -> str:
    """ok | refused (503 while draining) | no_connection | dropped_unanswered | bad."""
    if o.status == 200:
        return "bad" if any(answer_problem(a) for a in answers_of(o)) else "ok"
    if o.status == 503 and isinstance(o.body, dict) and o.body.get("error") == {
            "code": "shutting_down", "message": "the server is shutting down"}:
        return "refused"  # turned away at the door (not "shut down before this input ran": bad)
    if o.error and o.error.startswith("ConnectError"):
        return "no_connection"
    if o.error and ("without sending a response" in o.error or o.error.startswith("ReadError")):
        # The connection closed (FIN) or reset (RST: unread data) with no answer begun: an idle
        # keep-alive connection uvicorn closed as the request went out, or a connection still in
        # the listen backlog when the socket closed. Neither request reached the app: uvicorn
        # lets every connection with a request in progress finish (or logs that it cancelled
        # it), and a reset after an answer began shows as a logged response not received.
        return "dropped_unanswered"
    return "bad"


def run_shutdown(repository: Path, load_seconds: float = 2.0, concurrency: int = 16, shutdown_timeout_s: float = 10.0,
                 max_batch_delay_ms: float = 50.0, seed: int = 0, workdir: Path = Path("runs/reliability")) -> dict:
    """R4: closed-loop load on keep-alive connections plus a stream of fresh connections; SIGTERM
    after `load_seconds` while the load goes on until the process exits. Every request the
    server took must get a complete answer (200), later ones a 503 `shutting_down` or no
    connection at all; the process exits gracefully within its shutdown timeout."""
    models = repository_models(repository)
    calls = [(r.path, r.body) for r in WorkloadMaker(models, seed).mixed(500)]
    server = ServiceProcess(repository, workdir / "shutdown.log", shutdown_timeout_s=shutdown_timeout_s,
                            max_batch_delay_ms=max_batch_delay_ms, access_log=True)
    server.start()
    records: list[tuple[str, Outcome]] = []  # (source, outcome)
    timeline: dict[str, float] = {}

    async def scenario() -> None:
        exited = asyncio.Event()

        async def worker(client: httpx.AsyncClient, k: int) -> None:
            i = k
            while not exited.is_set():
                o = await post(client, *calls[i % len(calls)])
                records.append(("keep-alive", o))
                i += concurrency
                if o.status != 200:
                    await asyncio.sleep(0.01)

        async def fresh_connections() -> None:
            i = 0
            while not exited.is_set():
                async with loadgen.client(server.base, 1) as client:  # one new TCP connection per request
                    records.append(("fresh", await post(client, *calls[i % len(calls)])))
                i += 1
                await asyncio.sleep(0.02)

        async def sigterm_then_wait() -> None:
            await asyncio.sleep(load_seconds)
            timeline["sigterm"] = time.monotonic()
            server.proc.send_signal(signal.SIGTERM)
            timeline["returncode"] = await asyncio.to_thread(server.proc.wait, shutdown_timeout_s + 30)
            timeline["exited"] = time.monotonic()
            await asyncio.sleep(0.2)  # a few more attempts against the closed port
            exited.set()

        async with loadgen.client(server.base, concurrency) as client:
            await asyncio.gather(sigterm_then_wait(), fresh_connections(),
                                 *(worker(client, k) for k in range(concurrency)))

    try:
        run_async(scenario())
    finally:
        server.__exit__()
    return _shutdown_report(records, timeline, server.log_records(), concurrency, shutdown_timeout_s, max_batch_delay_ms)


def _shutdown_report(records: list[tuple[str, Outcome]], timeline: dict[str, float], logs: list[dict], concurrency: int,
                     shutdown_timeout_s: float, max_batch_delay_ms: float) -> dict:
    """run_shutdown's result: the clients' (source, outcome) `records` before and after SIGTERM
    against the server's log `logs`, and whether the shutdown passed."""
    sigterm = timeline["sigterm"]
    before = [o for _, o in records if o.sent < sigterm]
    after = [o for _, o in records if o.sent >= sigterm]
    kinds = {"before": {}, "after": {}}
    for name, group in (("before", before), ("after", after)):
        for o in group:
            kinds[name][_kind(o)] = kinds[name].get(_kind(o), 0) + 1
    # The access log has one line per response the server started; the client must have
    # received every one of them, complete.
    sent_by_server: dict[str, int] = {}
    for r in logs:
        m = ACCESS_LINE.search(r.get("message", "")) if r.get("logger") == "uvicorn.access" else None
        if m and m["path"] in ENDPOINT_OF_TASK.values():
            sent_by_server[m["status"]] = sent_by_server.get(m["status"], 0) + 1
    received = {}
    for _, o in records:
        if o.status:
            received[str(o.status)] = received.get(str(o.status), 0) + 1
    messages = [r.get("message", "") for r in logs]
    fresh_after_200 = sum(1 for src, o in records if src == "fresh" and o.sent >= sigterm + 0.05 and o.status == 200)
    dropped = kinds["before"].get("dropped_unanswered", 0) + kinds["after"].get("dropped_unanswered", 0)
    in_flight = [o for o in before if o.sent + o.seconds > sigterm]
    exit_s = timeline["exited"] - sigterm
    result = {
        "scenario": "R4 graceful shutdown",
        "concurrency": concurrency,
        "settings": {"shutdown_timeout_s": shutdown_timeout_s, "max_batch_delay_ms": max_batch_delay_ms},
        "requests": len(records),
        "outcomes_sent_before_sigterm": kinds["before"],
        "outcomes_sent_after_sigterm": kinds["after"],
        "responses_logged_by_server": dict(sorted(sent_by_server.items())),
        "responses_received": dict(sorted(received.items())),
        "bad_examples": [{"status": o.status, "body": str(o.body)[:200], "error": o.error,
                          "sent_after_sigterm_s": round(o.sent - sigterm, 3), "seconds": round(o.seconds, 3)}
                         for _, o in records if _kind(o) == "bad"][:5],
        "in_flight_at_sigterm": len(in_flight),
        "in_flight_at_sigterm_answered_200": sum(_kind(o) == "ok" for o in in_flight),
        "fresh_connections_answered_200_after_sigterm": fresh_after_200,
        "dropped_unanswered": dropped,
        "exit_code": timeline["returncode"],
        "exit_seconds": round(exit_s, 3),
        "drain_finished": "stopped" in messages,
        "drain_timed_out": "drain timed out" in messages,
        "requests_cancelled_by_uvicorn": any(UVICORN_CANCELLED in m for m in messages),
    }
    result["passed"] = bool(
        kinds["before"].get("ok", 0) > 0
        and "bad" not in kinds["before"] and "bad" not in kinds["after"]
        and sent_by_server == received
        and fresh_after_200 == 0
        and dropped <= concurrency + 1  # each connection loses at most the one request it was sending
        and timeline["returncode"] in GRACEFUL_EXIT_CODES and exit_s <= shutdown_timeout_s
        and result["drain_finished"] and not result["drain_timed_out"]
        and not result["requests_cancelled_by_uvicorn"]
    )
    return result
