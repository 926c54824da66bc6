"""Models changed while serving (`ATTSERVE_MODEL_CONTROL_MODE`), as Triton's model control
modes: `none` (the models found at start serve until the process ends), `explicit` (the Open
Inference Protocol's repository API, service.http.repository_api, loads, unloads and reloads models
by name) and `poll` (the repository folders are scanned every `repository_poll_s`; a new,
changed or removed bundle is loaded, reloaded or unloaded by itself). docs/model-control.md.

A change never fails a request. A version is loaded and warmed up over every shape it can run
at before it takes traffic (`Service.load_entry`); then it replaces the old load of the same
version in one assignment (`Service.publish`), and the old load serves the requests already
queued on it (its engine drains) and is freed. A request that resolved the old load before the
switch and reaches its engine after it follows `ModelEntry.replaced_by` (service.http.routes.run). A
bundle that cannot be loaded (checksum, shape, corrupt file, a task other than the model's) leaves
the old load serving; the reason is in the repository index, /v1/models, the log and
`attserve_model_load_failures_total`.

With several workers (service.process.workers) each worker holds its own models. In poll mode each one
scans the folder. In explicit mode a change is an entry of a log in the workers' shared directory
(`control/NNNNNNNN.json`): the worker that takes the request writes it, every worker applies the
log in order (a replaced worker replays it from the start), and the request is answered once
every worker has applied it, so the index and /health/ready agree across workers.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import re
import time
from pathlib import Path
from typing import Any

from core.bundle import CONFIG_FILE, MODEL_FILE, TOKENIZER_FILE
from service.errors import ServiceError, excerpt
from service.inference.registry import BundleOnDisk, ModelEntry, Service, bundles_on_disk, public_message, version_order
from service.worker_group import WorkerGroup

log = logging.getLogger("service.inference.model_control")

# a model name as the repository API takes it: a bundle name (core.bundle.BundleConfig.name)
MODEL_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
# how often a worker looks for log entries written by the others, and how long a request waits
# for every worker to apply its change
LOG_POLL_S = 0.2
WORKERS_WAIT_S = 300.0


class ModelNotInRepository(ServiceError):
    status, code = 404, "model_not_found"


class LoadFailed(ServiceError):
    # Triton answers a failed load 400
    status, code = 400, "load_failed"


def inside(path: Path, roots: list[Path]) -> bool:
    """The bundle folder `path` and its files (links resolved) lie inside one of `roots`: a
    bundle, or one of its files, linked in from elsewhere is never loaded by name."""
    real_roots = [root.resolve() for root in roots]
    return all(any(p.resolve().is_relative_to(root) for root in real_roots)
               for p in (path, *(path / file for file in (CONFIG_FILE, MODEL_FILE, TOKENIZER_FILE))))


class ModelControl:
    """Load, unload and reload the models of `service` while it serves; one change at a time."""

    def __init__(self, service: Service, group: WorkerGroup | None = None) -> None:
        self.service = service
        self.settings = service.settings
        self.mode = self.settings.model_control_mode
        self.metrics = service.metrics
        self._lock = asyncio.Lock()
        # the files of a version that failed to load in poll mode: not tried again until they change
        self._rejected: dict[tuple[str, str], tuple] = {}
        # versions on disk that failed to load and serve nowhere: (name, version) -> why
        self._unavailable: dict[tuple[str, str], str] = {}
        # models on disk that ATTSERVE_MODELS leaves out, logged once by the poll (never loaded)
        self._not_allowed: set[str] = set()
        # draining old loads (kept so they are not collected mid-drain)
        self._retiring: set[asyncio.Task] = set()
        self.canary: dict[str, tuple[str, float]] = dict(self.settings.canary)
        self._log_dir = group.dir.parent / "control" if group is not None else None
        self._group = group
        self._applied = 0  # the last log entry this worker applied

    # --- the repository ---------------------------------------------------------------------

    def on_disk(self, name: str | None = None) -> list[BundleOnDisk]:
        """The bundles of every repository folder (of model `name` only, when given)."""
        return [b for b in bundles_on_disk(self.service.repositories) if name is None or b.name == name]

    def index(self) -> list[dict[str, str]]:
        """The repository index (Triton's): every version of every model on disk or served, with
        its state (READY, LOADING, UNAVAILABLE) and the reason when it is not ready or its last
        reload failed; a bundle on disk that is not loaded is UNAVAILABLE, "unloaded"."""
        rows: dict[tuple[str, str], dict[str, str]] = {}
        refused: dict[tuple[str, str], str] = {}  # a version whose files may not be read as they lie
        for bundle in self.on_disk():
            refusal = self._refusal(bundle.name, bundle)
            if bundle.error is not None:
                refused[(bundle.name, bundle.version)] = public_message(bundle.error, self.service.repositories)
            reason = public_message(refusal, self.service.repositories) if refusal else \
                self._unavailable.get((bundle.name, bundle.version), "unloaded")
            rows[(bundle.name, bundle.version)] = {"name": bundle.name, "version": bundle.version,
                                                   "state": "UNAVAILABLE", "reason": reason}
        for name in self.service.versions:
            for row in self.service.version_index(name):
                reason = row["reason"] or refused.get((name, row["version"]), "")
                rows[(name, row["version"])] = {"name": name, "version": row["version"], "state": row["state"],
                                                "reason": reason}
        return [rows[k] for k in sorted(rows, key=lambda k: (k[0], version_order(k[1])))]

    # --- changes ------------------------------------------------------------------------------

    async def load(self, name: str) -> None:
        """Load model `name` from the repository, or reload it: every version on disk is loaded
        if new or changed, every version no longer on disk unloaded; what did not change keeps
        serving untouched. LoadFailed when a version could not be loaded (the old one serves)."""
        self._check_name(name)
        await self._change({"action": "load", "name": name})

    async def unload(self, name: str) -> None:
        """Stop serving model `name` (every version): new requests for it get 422 unknown_model,
        the ones queued finish."""
        self._check_name(name)
        if name not in self.service.versions:
            raise ModelNotInRepository(f"model {name!r} is not loaded")
        await self._change({"action": "unload", "name": name})

    async def set_canary(self, name: str, version: str | None, share: float) -> None:
        """Send `share` of the requests for `name` that name no version to `version` (None or a
        share of 0: none)."""
        self._check_name(name)
        if version is not None and version not in self.service.versions.get(name, {}):
            raise ModelNotInRepository(f"model {name!r} has no version {excerpt(version)} loaded")
        await self._change({"action": "canary", "name": name, "version": version, "share": share})

    def _check_name(self, name: str) -> None:
        if not MODEL_NAME.fullmatch(name):
            raise ModelNotInRepository(f"{excerpt(name)} is not a model name (a bundle's name: a-z, 0-9, '.', '_', "
                                       "'-'; no path)")

    async def _change(self, change: dict[str, Any]) -> None:
        if self._log_dir is None:
            async with self._lock:
                await self._apply(change)
            return
        # several workers: the change goes through the shared log, and is answered once all applied it
        number = await asyncio.to_thread(self._append, change)
        async with self._lock:
            error = None
            for at, entry in await asyncio.to_thread(self._pending):
                try:
                    await self._apply(entry)
                except ServiceError as exc:
                    if at == number:
                        error = exc
                self._mark_applied(at)
        await self._wait_for_workers(number)
        if error is not None:
            raise error

    async def _apply(self, change: dict[str, Any]) -> None:
        name = change["name"]
        if change["action"] == "unload":
            for entry in list(self.service.versions.get(name, {}).values()):
                self._remove(entry)
            self.service.versions.pop(name, None)
            self.service.publish()
            log.info("model unloaded", extra={"model": name})
        elif change["action"] == "canary":
            if change["version"] is None or change["share"] <= 0:
                self.canary.pop(name, None)
            else:
                self.canary[name] = (change["version"], float(change["share"]))
            log.info("canary", extra={"model": name, "version": change["version"], "share": change["share"]})
        else:
            bundles = self.on_disk(name)
            if not bundles:
                raise ModelNotInRepository(f"no bundle of model {name!r} in the repository "
                                           f"({', '.join(r.resolve().name for r in self.service.repositories)}; ATTSERVE_MODEL_REPOSITORY)")
            failures = await self._sync(name, bundles, retry=True)
            if failures:
                raise LoadFailed(f"model {name!r}: " + "; ".join(failures))

    async def _sync(self, name: str, bundles: list[BundleOnDisk], retry: bool) -> list[str]:
        """Make the served versions of `name` those on disk. The reasons of the versions that
        could not be loaded (each leaves what served before serving)."""
        served = self.service.versions.get(name, {})
        failures = []
        versions_seen: set[str] = set()
        for bundle in sorted(bundles, key=lambda b: (version_order(b.version), str(b.path))):
            if bundle.version in versions_seen:
                continue  # a second folder of this version: refused with the first (refuse_layouts)
            versions_seen.add(bundle.version)
            current = served.get(bundle.version)
            if bundle.error is None and current is not None and current.fingerprint == bundle.fingerprint \
                    and current.path == bundle.path and (current.status == "ready" or not retry):
                current.reason = None  # what serves is what is on disk: an earlier refusal no longer holds
                self._rejected.pop((name, bundle.version), None)
                continue  # unchanged (or, polled, failed already with these very files)
            if not retry and self._rejected.get((name, bundle.version)) == bundle.fingerprint:
                continue
            error = self._refusal(name, bundle)
            entry = None
            if error is None:
                entry = ModelEntry(name, bundle.path, bundle.config, version=bundle.version,
                                   fingerprint=bundle.fingerprint)
                error = await self.service.load_entry(entry)
            if error is not None:
                failures.append(f"version {bundle.version}: {public_message(error, self.service.repositories)}")
                self._failed(name, bundle, current, error)
                continue
            self._rejected.pop((name, bundle.version), None)
            self._unavailable.pop((name, bundle.version), None)
            self.service.versions.setdefault(name, {})[bundle.version] = entry
            self.service.publish()
            if current is not None:
                self._remove(current, replaced_by=entry)
            log.info("model version loaded", extra={"model": name, "version": bundle.version,
                                                    "reloaded": current is not None})
        gone = set(served) - {b.version for b in bundles}
        for version in gone:
            self._remove(served.pop(version))
            log.info("model version unloaded", extra={"model": name, "version": version})
        if gone:
            if not served:
                self.service.versions.pop(name, None)
            self.service.publish()
        return failures

    def _refusal(self, name: str, bundle: BundleOnDisk) -> str | None:
        """Why `bundle` may not be loaded as a version of `name`, before any work on it."""
        allowed = self.settings.models
        if allowed and name not in allowed:
            return f"{name!r} is not in the allow-list ATTSERVE_MODELS ({', '.join(allowed)}): not loaded"
        if not inside(bundle.path, self.service.repositories):
            return f"{bundle.path} lies outside the model repository (a link, of the folder or a file): not loaded"
        if bundle.error is not None:
            return bundle.error
        tasks = {e.task for e in self.service.versions.get(name, {}).values() if e.task and e.version != bundle.version}
        if tasks and bundle.config.task not in tasks:
            return (f"{bundle.path}: this bundle does {bundle.config.task}, the model {name!r} serves "
                    f"{', '.join(sorted(tasks))}: load it under another name")
        return None

    def _failed(self, name: str, bundle: BundleOnDisk, current: ModelEntry | None, error: str) -> None:
        self._rejected[(name, bundle.version)] = bundle.fingerprint
        self.metrics.load_failures.labels(model=name).inc()
        log.error("model version failed to load", extra={"model": name, "version": bundle.version, "error": error,
                                                         "still_serving": current is not None and current.status == "ready"})
        reason = public_message(error, self.service.repositories)
        if current is not None and current.status == "ready":
            current.reason = "last reload failed: " + reason
        else:
            # not served (a model that never loaded would hold /health/ready at 503): the index says why
            self._unavailable[(name, bundle.version)] = reason

    def _remove(self, entry: ModelEntry, replaced_by: ModelEntry | None = None) -> None:
        """Take `entry` out of service: a request that still holds it goes to `replaced_by`
        (service.http.routes.run); its queued requests finish, then it is freed."""
        entry.replaced_by = replaced_by
        entry.retired = True
        if entry.engine is not None:
            task = asyncio.get_running_loop().create_task(self._free(entry), name=f"retire-{entry.name}")
            self._retiring.add(task)
            task.add_done_callback(self._retiring.discard)

    async def _free(self, entry: ModelEntry) -> None:
        engine = entry.engine
        await engine.drain(self.settings.shutdown_timeout_s)  # runs what is queued, then stops its thread
        # the last references: the session and its engine are freed by reference counting (no
        # collector pass: a full one holds the event loop, and nothing of a load is in a cycle
        # once its engine drained, as weak references showed)
        entry.engine = entry.runtime = None

    # --- poll mode ----------------------------------------------------------------------------

    async def poll_once(self) -> None:
        """Bring every model in step with the repository folders: load what is new or
        changed, unload what is gone."""
        async with self._lock:
            by_name: dict[str, list[BundleOnDisk]] = {}
            for bundle in await asyncio.to_thread(self.on_disk):
                by_name.setdefault(bundle.name, []).append(bundle)
            for name, bundles in by_name.items():
                if self.settings.models and name not in self.settings.models:
                    if name not in self._not_allowed:
                        self._not_allowed.add(name)
                        log.warning("model in the repository not loaded: not in ATTSERVE_MODELS",
                                    extra={"model": name, "allowed": self.settings.models})
                    continue
                await self._sync(name, bundles, retry=False)
            for name in [n for n in self.service.versions if n not in by_name]:
                for entry in self.service.versions.pop(name).values():
                    self._remove(entry)
                self.service.publish()
                log.info("model unloaded", extra={"model": name, "reason": "no longer in the repository"})

    async def run(self) -> None:
        """The background work of the mode: the poll loop, or following the workers' log."""
        if self.mode == "poll":
            while True:
                await asyncio.sleep(self.settings.repository_poll_s)
                try:
                    await self.poll_once()
                except Exception:  # a scan that fails (a folder removed mid-scan) is tried again
                    log.exception("repository poll failed")
        elif self.mode == "explicit" and self._log_dir is not None:
            await asyncio.to_thread(self._log_dir.mkdir, parents=True, exist_ok=True)
            self._mark_applied(self._applied)  # counted among the workers a change waits for
            while True:
                await asyncio.sleep(LOG_POLL_S)
                async with self._lock:
                    for at, change in await asyncio.to_thread(self._pending):
                        try:
                            await self._apply(change)
                        except ServiceError as exc:
                            log.warning("change from the workers' log failed here too", extra={"detail": exc.message})
                        self._mark_applied(at)

    # --- the workers' log -----------------------------------------------------------------------

    def _append(self, change: dict[str, Any]) -> int:
        self._log_dir.mkdir(parents=True, exist_ok=True)
        while True:
            numbers = [int(p.stem) for p in self._log_dir.glob("*.json") if p.stem.isdigit()]
            number = max(numbers, default=0) + 1
            try:
                fd = os.open(self._log_dir / f"{number:08d}.json", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                continue  # another worker took that number
            with os.fdopen(fd, "w") as f:
                json.dump(change, f)
            return number

    def _pending(self) -> list[tuple[int, dict[str, Any]]]:
        if not self._log_dir.is_dir():
            return []
        out = []
        for path in sorted(self._log_dir.glob("*.json")):
            if path.stem.isdigit() and int(path.stem) > self._applied:
                try:
                    out.append((int(path.stem), json.loads(path.read_text())))
                except (OSError, ValueError):
                    break  # being written: the rest waits for the next look
        return out

    def _mark_applied(self, number: int) -> None:
        self._applied = number
        (self._log_dir / f"applied-{os.getpid()}").write_text(str(number))

    async def _wait_for_workers(self, number: int) -> None:
        deadline = time.monotonic() + WORKERS_WAIT_S
        while time.monotonic() < deadline:
            live = await asyncio.to_thread(self._live_applied)
            if len(live) >= self._group.expected and min(live) >= number:
                return
            await asyncio.sleep(LOG_POLL_S / 2)
        log.warning("workers did not all apply a change in time", extra={"change": number})

    def _live_applied(self) -> list[int]:
        """The last entry each live worker applied."""
        out = []
        for path in self._log_dir.glob("applied-*"):
            pid = int(path.name.split("-", 1)[1])
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                continue
            except PermissionError:
                pass
            try:
                out.append(int(path.read_text() or 0))
            except (OSError, ValueError):
                out.append(0)
        return out

    # --- canary -----------------------------------------------------------------------------

    def pick(self, name: str, default: ModelEntry) -> ModelEntry:
        """The entry a request for `name` naming no version runs on: the default, except with a
        canary, which takes its share of them, the rest going to the newest other ready version
        (the default, unless the canary is the newest)."""
        canary = self.canary.get(name)
        if canary is None:
            return default
        versions = self.service.versions.get(name, {})
        chosen = versions.get(canary[0])
        if chosen is None or chosen.status != "ready":
            return default
        if random.random() < canary[1]:
            return chosen
        if default is not chosen:
            return default
        others = [e for e in versions.values() if e is not chosen and e.status == "ready"]
        return max(others, key=lambda e: version_order(e.version)) if others else default
