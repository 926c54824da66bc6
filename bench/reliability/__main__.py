"""`python -m bench.reliability SCENARIO`: one subcommand per scenario (bench/reliability/)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import typer

from bench.reliability.abuse import run_abuse
from bench.reliability.expansion import run_expansion
from bench.reliability.isolation import run_isolation
from bench.reliability.overload import run_overload
from bench.reliability.probes import run_probes
from bench.reliability.shutdown import run_shutdown
from bench.reliability.slow_clients import run_slow_clients
from bench.reliability.soak import run_soak
from service.settings import DEFAULT_MODEL_REPOSITORY


log = logging.getLogger("bench.reliability")

cli = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Reliability runs against a real attserve process.")
RepositoryOption = typer.Option(DEFAULT_MODEL_REPOSITORY, "--repository", help="Model repository to serve.")


def _finish(result: dict, out: Path | None, name: str) -> None:
    out = out or Path("runs/reliability") / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    summary = {k: v for k, v in result.items() if k not in ("rss_samples", "mismatch_examples")}
    log.info("result", extra={"out": str(out), **summary})
    raise typer.Exit(0 if result["passed"] else 1)


@cli.command()
def isolation(repository: Path = RepositoryOption, requests: int = 10_000, concurrency: int = 64, seed: int = 0,
              max_batch_delay_ms: float = 50.0, out: Path | None = None) -> None:
    """R1: mixed requests at concurrency; every answer equals its solo answer."""
    _finish(run_isolation(repository, requests, concurrency, seed, max_batch_delay_ms=max_batch_delay_ms,
                          progress=True), out, "isolation")


@cli.command()
def overload(repository: Path = RepositoryOption, factor: float = 4.0, duration: float = 30.0,
             inputs_per_request: int = 64, max_queue: int = 128, request_timeout_ms: float = 1000.0,
             model: str | None = None, out: Path | None = None) -> None:
    """R2: ~factor x capacity with a small queue; 429 + Retry-After, no other 5xx."""
    _finish(run_overload(repository, factor, duration, model=model, inputs_per_request=inputs_per_request,
                         max_queue=max_queue, request_timeout_ms=request_timeout_ms, progress=True), out, "overload")


@cli.command()
def shutdown(repository: Path = RepositoryOption, load: float = 5.0, concurrency: int = 16,
             shutdown_timeout_s: float = 10.0, out: Path | None = None) -> None:
    """R4: SIGTERM under sustained load; every accepted request answered, exit in time."""
    _finish(run_shutdown(repository, load, concurrency, shutdown_timeout_s), out, "shutdown")


@cli.command()
def soak(repository: Path = RepositoryOption, minutes: float = 10.0, load: float = 0.5, out: Path | None = None) -> None:
    """R6: minutes at a fraction of capacity; zero errors, RSS growth from minute 2 < 5%."""
    _finish(run_soak(repository, minutes, load, progress=True), out, "soak")


@cli.command()
def expansion(repository: Path = RepositoryOption, concurrent: int = 6, rounds: int = 3, out: Path | None = None) -> None:
    """R7: concurrent maximum-size bodies of U+FDFA (NFKC x18): 422/200 in time, RSS +300 MB at most."""
    _finish(run_expansion(repository, concurrent, rounds), out, "expansion")


@cli.command()
def probes(repository: Path = RepositoryOption, unread_clients: int = 40, out: Path | None = None) -> None:
    """R10: one probe per finding of the second review; 4xx within 1 s, RSS +50 MB at most each."""
    _finish(run_probes(repository, unread_clients=unread_clients), out, "probes")


@cli.command()
def abuse(repository: Path = RepositoryOption, seconds: float = 60.0, settle: float = 10.0, unread: int = 20,
          slow: int = 20, mem_limit_mb: float = 2048.0, out: Path | None = None) -> None:
    """R10: mixed abuse; peak RSS under mem_limit, within 20% of idle `settle` s after."""
    _finish(run_abuse(repository, seconds, settle, unread, slow, mem_limit_mb), out, "abuse")


@cli.command("slow-clients")
def slow_clients(repository: Path = RepositoryOption, idle: int = 20_000, slowloris: int = 200,
                 header_timeout: float = 10.0, duration: float = 20.0, out: Path | None = None) -> None:
    """R8: idle connections + slowloris; normal requests p99 < 100 ms, all closed at the header timeout."""
    _finish(run_slow_clients(repository, idle, slowloris, header_timeout, duration), out, "slow-clients")


if __name__ == "__main__":
    from service.logs import configure_logging

    configure_logging("INFO", "text")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
    cli()
