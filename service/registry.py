"""The model registry: the served models (their bundles, runtimes and engines), start-up
discovery and loading, each task's default model, and resolving the model a request runs on.
Knows nothing of HTTP: the routes (service.routes, service.oip) and the app (service.app)
call it.

Start-up never blocks the port: `discover` reads every bundle's config.json, then `load_all`
loads the sessions and warms them up in the background, so `/health/live` answers at once and
`/health/ready` says 503 until every model is warm (TEI #553: report not-ready, do not refuse
connections).

Start-up fails fast: a missing repository, an allow-listed model that does not exist (the
message lists those that do) or a repository with no bundle stop it (`StartupError`, before the
port opens under `attserve serve`); so does a bundle that is invalid or fails to load (bad
checksum, unreadable graph, wrong label count), unless `allow_partial_start`: then it is logged
with the file at fault and listed as `failed` in /v1/models, the other models keep serving
their endpoints, and /health/ready stays 503. A task with no model is 404 `no_model_for_task`.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from core.bundle import CONFIG_FILE, BundleConfig, BundleError, read_config
from core.tasks import TASKS
from service.engine import Engine, warm_up
from service.errors import NoModelForTask, NotReady, UnknownModel, WrongTask, excerpt
from service.metrics import Metrics
from service.runtime import DeviceUnavailable, ModelRuntime, requested_providers
from service.settings import Settings

log = logging.getLogger("service.registry")
_LOAD_IDS = itertools.count(1)


# --- what error messages may show ------------------------------------------------------------

_ABSOLUTE_PATH = re.compile(r"(?<![\w.])/(?:[^\s'\":,;()\[\]]+/)*([^\s'\":,;()\[\]/]+)")


def public_message(message: str, repositories: list[Path]) -> str:
    """A load error as clients may see it: paths inside a repository relative to it, any
    other absolute path cut to its file name."""
    roots = {str(r.resolve()) for r in repositories} | {str(r) for r in repositories}
    for root in sorted(roots, key=len, reverse=True):
        message = message.replace(root.rstrip("/") + "/", "")
    return _ABSOLUTE_PATH.sub(lambda m: m.group(1), message)


class StartupError(Exception):
    """The configuration cannot be served (missing repository or model, no bundle, an invalid
    bundle without allow_partial_start); the message says what exists instead."""


# --- model registry -------------------------------------------------------------------------

def recorded_test_accuracy(config: BundleConfig | None) -> float:
    """The test accuracy a bundle's config.json records, 0 if none."""
    value = ((config.metrics if config else {}).get("test") or {}).get("accuracy")
    return float(value) if isinstance(value, (int, float)) else 0.0


@dataclass
class ModelEntry:
    name: str
    path: Path
    config: BundleConfig | None = None
    status: str = "loading"  # loading | ready | failed
    error: str | None = None  # as logged (full paths)
    public_error: str | None = None  # as /v1/models shows it (paths relative to the repository)
    runtime: ModelRuntime | None = None
    engine: Engine | None = None  # set once the runtime is loaded and warm
    # unique to each load of a bundle in this process (set with `engine`): what a cached answer
    # is keyed on, so an answer of one load is never served by another
    load_id: int = 0

    @property
    def task(self) -> str | None:
        return self.config.task if self.config else None


class Service:
    """Everything the routes need: settings, metrics, models, and the drain flag."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.metrics = Metrics()
        self.providers = requested_providers(settings.device)  # DEVICE=cuda without CUDA fails here
        self.models: dict[str, ModelEntry] = {}
        self.discovered = False
        self.loaded = False
        # set when a bundle failed to load and partial start-up is not allowed; `attserve serve`
        # stops the server through on_fatal and exits non-zero
        self.fatal: str | None = None
        self.on_fatal: Callable[[str], None] | None = None
        self.draining = False
        self._drain_started: float | None = None
        # body reads in progress (their asyncio.Timeout): a drain ends them at once
        self.body_reads: set[asyncio.Timeout] = set()

    # --- discovery and loading ----------------------------------------------------------

    @property
    def repositories(self) -> list[Path]:
        return [Path(p) for p in self.settings.model_repository]

    def discover(self) -> None:
        """Every non-hidden sub-directory with a config.json, in each repository, is a bundle
        (export stages its work in hidden directories beside the target).

        Raises StartupError when a repository is missing or holds no bundle, when an
        allow-listed model does not exist (the message lists those that do), or, unless
        `allow_partial_start`, when a bundle's config.json is invalid or its name taken."""
        self.discovered = True
        problems: list[str] = []
        allow = set(self.settings.models) if self.settings.models else None
        found: list[str] = []  # every bundle name (or directory name, when its config is broken)
        for repo in self.repositories:
            if not repo.is_dir():
                log.error("model repository not found", extra={"path": str(repo)})
                problems.append(f"model repository {repo} is not a directory")
                continue
            for path in sorted(p for p in repo.iterdir() if p.is_dir() and not p.name.startswith(".")):
                if not (path / CONFIG_FILE).is_file():
                    continue
                try:
                    config = read_config(path / CONFIG_FILE)
                except BundleError as exc:
                    found.append(path.name)
                    if allow is None or path.name in allow:
                        self._fail(ModelEntry(path.name, path), str(exc))
                    continue
                found.append(config.name)
                if allow is not None and config.name not in allow:
                    continue
                entry = ModelEntry(config.name, path, config)
                if config.name in self.models:
                    self._fail(ModelEntry(f"{config.name}@{path.parent.name}/{path.name}", path, config),
                               f"{path / CONFIG_FILE}: model name {config.name!r} already used by {self.models[config.name].path}")
                    continue
                self.models[config.name] = entry
        where = ", ".join(str(r) for r in self.repositories)
        missing = sorted((allow or set()) - set(self.models))
        if missing:
            problems.append(f"allow-listed model(s) {', '.join(missing)} not found in {where}; "
                            f"bundles there: {', '.join(sorted(set(found))) or 'none'}")
        elif not found:
            problems.append(f"no bundle (a directory with config.json) in {where}")
        for task in TASKS:
            wanted = self.settings.default_model(task)
            entry = self.models.get(wanted) if wanted else None
            if entry is not None and entry.status == "failed" and entry.config is None:
                continue  # its broken config.json is reported (or allowed) as such
            if wanted and (entry is None or entry.task != task):
                log.error("default model is not a served model of its task", extra={"task": task, "model": wanted})
                served = sorted(n for n, e in self.models.items() if e.task == task)
                problems.append(f"ATTSERVE_DEFAULT_{task.upper()}_MODEL={wanted} is not a served {task} model "
                                f"(served: {', '.join(served) or 'none'})")
        if not self.models:
            log.error("no models to serve", extra={"path": where})
        # a typo or an empty repository always stops start-up; a broken bundle unless allowed
        broken = [e for e in self.models.values() if e.status == "failed"]
        if broken and not problems and not self.settings.allow_partial_start:
            raise StartupError("cannot start: " + "; ".join(e.error or e.name for e in broken) +
                               " (set ATTSERVE_ALLOW_PARTIAL_START=true to serve the healthy bundles anyway)")
        if problems:
            raise StartupError("cannot start: " + "; ".join(problems))
        for task in TASKS:
            name, reason = self.default_choice(task)
            if name is not None and sum(1 for e in self.models.values() if e.task == task) > 1:
                log.info("default model", extra={"task": task, "model": name, "reason": reason})

    def _fail(self, entry: ModelEntry, message: str) -> None:
        entry.status, entry.error = "failed", message
        entry.public_error = public_message(message, self.repositories)
        self.models[entry.name] = entry
        log.error("model failed to load", extra={"model": entry.name, "error": message})

    async def load_all(self) -> None:
        pending = [e for e in self.models.values() if e.status == "loading"]
        threads = self.settings.threads_per_model(len(pending))
        for entry in pending:
            try:
                entry.runtime = await asyncio.to_thread(ModelRuntime.load, entry.path, self.providers, threads,
                                                        self.settings.cuda_provider_options())
                seconds = await asyncio.to_thread(warm_up, entry.runtime, self.settings)
            except (BundleError, DeviceUnavailable) as exc:
                self._fail(entry, str(exc))
                continue
            except Exception as exc:  # a broken graph may fail at warm-up with onnxruntime's own errors
                self._fail(entry, f"{entry.path}: {type(exc).__name__}: {exc}")
                continue
            entry.engine = Engine(entry.runtime, self.settings, self.metrics)
            entry.load_id = next(_LOAD_IDS)
            entry.engine.start()
            entry.status = "ready"
            c = entry.config
            self.metrics.model_info.labels(
                model=entry.name, task=c.task, architecture=c.architecture, version=c.version,
                provider=entry.runtime.provider,
            ).set(1)
            log.info("model ready", extra={
                "model": entry.name, "task": c.task, "architecture": c.architecture, "version": c.version,
                "provider": entry.runtime.provider, "provider_options": entry.runtime.provider_options,
                "intra_op_threads": threads, "warmup_s": round(seconds, 3),
                "warmup_shapes": entry.runtime.warmup_report["shapes"], "batch_grid": entry.runtime.batch_sizes,
                "call_overhead_tokens": round(entry.runtime.call_overhead_tokens, 1),
            })
        self.loaded = True
        failed = sorted(n for n, e in self.models.items() if e.status == "failed")
        if failed and not self.settings.allow_partial_start:
            self.fatal = "cannot start: " + "; ".join(self.models[n].error or n for n in failed) + \
                " (set ATTSERVE_ALLOW_PARTIAL_START=true to serve the healthy bundles anyway)"
            log.error("start-up failed", extra={"failed": failed})
            if self.on_fatal is not None:
                self.on_fatal(self.fatal)
        # Everything alive now (modules, sessions, tokenizers, the app) lives as long as the
        # process: move it out of the collector's reach, so a full collection walks only what
        # requests allocate (its pauses, before and after: docs/performance.md).
        gc.collect()
        gc.freeze()
        log.info("service ready" if self.ready else "service not ready",
                 extra={"models": {n: e.status for n, e in self.models.items()},
                        "gc_frozen_objects": gc.get_freeze_count()})

    @property
    def ready(self) -> bool:
        return (self.loaded and not self.draining and bool(self.models)
                and all(e.status == "ready" for e in self.models.values()))

    # --- routing ------------------------------------------------------------------------

    def default_choice(self, task: str) -> tuple[str | None, str | None]:
        """The model a request of `task` that names none runs on, and why it is that one."""
        wanted = self.settings.default_model(task)
        if wanted:
            return wanted, f"set by ATTSERVE_DEFAULT_{task.upper()}_MODEL"
        candidates = sorted((e for e in self.models.values() if e.task == task and e.status != "failed"),
                            key=lambda e: e.name)
        if not candidates:
            return None, None
        marked = [e for e in candidates if e.config is not None and e.config.default]
        if len(marked) == 1:
            return marked[0].name, "marked \"default\": true in its config.json"
        if marked:
            return marked[0].name, (f"first by name of the bundles marked \"default\": true "
                                    f"({', '.join(e.name for e in marked)})")
        if len(candidates) == 1:
            return candidates[0].name, f"the only {task} model served"
        # No default set: the most accurate model of the task on its own test split (the figure
        # its bundle records), then name order. Stated in the start-up log and /v1/models,
        # since the figures may come from different test sets.
        best = min(candidates, key=lambda e: (-recorded_test_accuracy(e.config), e.name))
        return best.name, (f"no default set (ATTSERVE_DEFAULT_{task.upper()}_MODEL or \"default\": true in "
                           f"a config.json): the highest recorded test accuracy of {len(candidates)} "
                           f"{task} models, then name order")

    def default_name(self, task: str) -> str | None:
        return self.default_choice(task)[0]

    def resolve(self, name: str | None, task: str) -> ModelEntry:
        """The model a request runs on; 422 for an unknown model or one of another task,
        404 when no model of the task is served, 503 for one still loading or failed."""
        if name is None:
            name = self.default_name(task)
            if name is None:
                if not self.discovered:
                    raise NotReady(f"no {task} model is loaded yet", headers={"Retry-After": "5"})
                served = sorted({e.task for e in self.models.values() if e.task and e.status != "failed"})
                raise NoModelForTask(f"no {task} model is served here (tasks served: "
                                     f"{', '.join(served) or 'none'}; see /v1/models)")
        entry = self.models.get(name)
        if entry is None:
            known = sorted(n for n, e in self.models.items() if e.task == task)
            raise UnknownModel(f"unknown model {excerpt(name)}; {task} models: {known}")
        if entry.task is not None and entry.task != task:
            raise WrongTask(f"model {name!r} does {entry.task}, not {task}")
        if entry.status != "ready":
            detail = f"model {name!r} failed to load" if entry.status == "failed" else f"model {name!r} is still loading"
            raise NotReady(detail, headers={"Retry-After": "5"})
        return entry

    # --- shutdown -----------------------------------------------------------------------

    def begin_drain(self) -> None:
        """New requests get 503 from now on; queued and in-flight ones finish."""
        if not self.draining:
            self.draining = True
            self._drain_started = time.monotonic()
            if self.body_reads:  # requests still reading their body: 503 now
                now = asyncio.get_running_loop().time()
                for reading in list(self.body_reads):
                    reading.reschedule(now)
            log.info("draining", extra={"timeout_s": self.settings.shutdown_timeout_s})

    async def shutdown(self) -> None:
        self.begin_drain()
        deadline = self._drain_started + self.settings.shutdown_timeout_s
        engines = [e.engine for e in self.models.values() if e.engine is not None]
        await asyncio.gather(*(engine.drain(deadline - time.monotonic()) for engine in engines))
        log.info("stopped", extra={"drain_s": round(time.monotonic() - self._drain_started, 3)})
