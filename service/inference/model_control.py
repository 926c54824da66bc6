"""Models changed while serving (`ATTSERVE_MODEL_CONTROL_MODE`), as Triton's model control
modes: `none` (the models found at start serve until the process ends), `explicit` (the Open
Inference Protocol's repository API, service.http.repository_api, loads, unloads and reloads models
by name) and `poll` (the repository folders are scanned every `repository_poll_s`; a new,
changed or removed bundle is loaded, reloaded or unloaded by itself). docs/model-control.md.

A change never fails a request. A version is loaded and warmed up over every shape it can run
at before it takes traffic (`Service.load_entry`); then it replaces the old load of the same
version in one assignment (`Service.publish`), and the old load serves the requests already
queued on it (its engine drains) and is freed. A request that resolved the old load before the
switch and reaches its engine after it follows `ModelEntry.replaced_by` (service.inference.dataplane.run). A
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
import logging
import os
import random
import re
import tempfile
import time
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr, TypeAdapter, ValidationError

from core.tasks import TASKS
from core.bundle import CONFIG_FILE, MODEL_FILE, TOKENIZER_FILE
from service.inference.errors import ChangeNotApplied, LoadFailed, ModelNotFound, ServiceError, WouldRemoveDefault, excerpt
from service.inference.registry import BundleOnDisk, ModelEntry, Service, bundles_on_disk, public_message, version_order
from service.worker_group import WorkerGroup

log = logging.getLogger("service.inference.model_control")

# a model name as the repository API takes it: a bundle name (core.bundle.BundleConfig.name)
MODEL_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
# how often a worker looks for log entries written by the others, and how long a request waits
# for every worker to apply its change
LOG_POLL_S = 0.2
WORKERS_WAIT_S = 300.0


# --- changes, as the workers' log holds them (and the repository API takes their parts) --------

Share = Annotated[float, Field(strict=True, ge=0, le=1)]  # strict: "0.5" and true are refused


class CanaryShare(BaseModel):
    """`share` of the requests for a model that name no version go to `version`; None: no canary."""

    model_config = ConfigDict(extra="forbid")
    version: StrictStr | None
    share: Share = 0.0


class LoadChange(BaseModel):
    model_config = ConfigDict(extra="forbid")
    action: Literal["load"]
    name: str = Field(pattern=MODEL_NAME.pattern)
    canary: CanaryShare | None = None  # set before the load publishes anything: staged from its first request


class UnloadChange(BaseModel):
    model_config = ConfigDict(extra="forbid")
    action: Literal["unload"]
    name: str = Field(pattern=MODEL_NAME.pattern)
    version: StrictStr | None = None  # None: every version


class CanaryChange(CanaryShare):
    action: Literal["canary"]
    name: str = Field(pattern=MODEL_NAME.pattern)


Change = Annotated[LoadChange | UnloadChange | CanaryChange, Field(discriminator="action")]
CHANGE = TypeAdapter(Change)


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
        self._log_dir = group.dir.parent / "control" if group is not None else None
        self._group = group
        self._applied = 0  # the last log entry this worker applied
        if self.mode == "explicit" and not self.settings.control_api_keys:
            log.warning("the repository API is open: any client that reaches the port may load and unload models "
                        "(set ATTSERVE_CONTROL_API_KEYS)")

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
                                                "reason": reason, "traffic": row["traffic"]}
        return [rows[k] for k in sorted(rows, key=lambda k: (k[0], version_order(k[1])))]

    # --- changes ------------------------------------------------------------------------------

    async def load(self, name: str, canary: CanaryShare | None = None) -> None:
        """Load model `name` from the repository, or reload it: every version on disk is loaded
        if new or changed, every version no longer on disk unloaded; what did not change keeps
        serving untouched. LoadFailed when a version could not be loaded (the old one serves).
        With `canary`, that version takes that share from its first request (0: staged, no traffic)."""
        self._check_name(name)
        if canary is not None and canary.version not in {b.version for b in self.on_disk(name)}:
            raise ModelNotFound(f"model {name!r} has no version {excerpt(str(canary.version))} in the "
                                       "repository to load as a canary")
        await self._change(LoadChange(action="load", name=name, canary=canary))

    async def unload(self, name: str, version: str | None = None, force: bool = False) -> None:
        """Stop serving model `name` (`version` of it only, when given): new requests for it get
        422 unknown_model, the ones queued finish. WouldRemoveDefault, unless `force`, when it
        would take the last ready version of its task's default model."""
        self._check_name(name)
        versions = self.service.versions.get(name)
        if not versions:
            raise ModelNotFound(f"model {name!r} is not loaded")
        if version is not None and version not in versions:
            raise ModelNotFound(f"model {name!r} has no version {excerpt(version)} loaded; its versions: "
                                       f"{sorted(versions, key=version_order)}")
        if not force:
            self._refuse_removing_default(name, version)
        await self._change(UnloadChange(action="unload", name=name, version=version))

    def _refuse_removing_default(self, name: str, version: str | None) -> None:
        entry = self.service.models.get(name)
        task = entry.task if entry is not None else None
        if task is None or self.service.default_name(task) != name:
            return
        left = [e for v, e in self.service.versions[name].items() if v != version and e.status == "ready"]
        if version is not None and left:
            return
        others = sorted(n for n, e in self.service.models.items() if n != name and e.task == task)
        after = (f"another {task} model ({others[0]}) would become the default" if others and
                 not self.settings.default_model(task) else
                 f"{task} would have no model: {TASKS[task].endpoint} answers 404 and /health/ready 503")
        what = f"version {version!r} is the last ready version of {name!r}" if version is not None else \
            f"{name!r} is the default {task} model"
        raise WouldRemoveDefault(f"{what}: unloading it, {after}; send {{\"parameters\": {{\"force\": true}}}} "
                                 "to unload it anyway")

    async def set_canary(self, name: str, version: str | None, share: float) -> None:
        """Send `share` of the requests for `name` that name no version to `version` (share 0:
        staged, none; version None: no canary, the newest ready version takes them all)."""
        self._check_name(name)
        if version is not None and version not in self.service.versions.get(name, {}):
            raise ModelNotFound(f"model {name!r} has no version {excerpt(version)} loaded")
        await self._change(CanaryChange(action="canary", name=name, version=version, share=share))

    def _check_name(self, name: str) -> None:
        if not MODEL_NAME.fullmatch(name):
            raise ModelNotFound(f"{excerpt(name)} is not a model name (a bundle's name: a-z, 0-9, '.', '_', "
                                       "'-'; no path)")

    async def _change(self, change: LoadChange | UnloadChange | CanaryChange) -> None:
        if self._log_dir is None:
            async with self._lock:
                await self._apply(change)
            return
        # several workers: the change goes through the shared log, and is answered once all applied it
        number = await asyncio.to_thread(self._append, change)
        async with self._lock:
            error = await self._apply_pending(number)
        await self._wait_for_workers(number)
        if error is not None:
            raise error

    async def _apply_pending(self, mine: int | None = None) -> ServiceError | None:
        """Apply the log entries this worker has not applied yet, in order; an entry that fails
        is reported and passed (the log never stops at one). The error of entry `mine`."""
        error = None
        for at, change in await asyncio.to_thread(self._pending):
            try:
                if change is not None:
                    await self._apply(change)
            except ServiceError as exc:
                if at == mine:
                    error = exc
                else:
                    log.warning("change from the workers' log failed here too", extra={"detail": exc.message})
            except Exception:
                log.exception("change from the workers' log failed", extra={"change": at})
                self.metrics.control_log_skipped.labels(reason="failed").inc()
                if at == mine:
                    error = ServiceError(f"the change failed on this worker (entry {at} of the workers' log; "
                                         "the log says why)")
            self._mark_applied(at)
        return error

    async def _apply(self, change: LoadChange | UnloadChange | CanaryChange) -> None:
        name = change.name
        if isinstance(change, UnloadChange):
            self._unload(name, change.version)
        elif isinstance(change, CanaryChange):
            self._set_canary(name, change.version, change.share)
        else:
            bundles = self.on_disk(name)
            if not bundles:
                raise ModelNotFound(f"no bundle of model {name!r} in the repository "
                                           f"({', '.join(r.resolve().name for r in self.service.repositories)}; ATTSERVE_MODEL_REPOSITORY)")
            before = self.service.canary.get(name)
            if change.canary is not None:  # before any new version is published
                self._set_canary(name, change.canary.version, change.canary.share)
            failures = await self._sync(name, bundles, retry=True)
            if change.canary is not None and change.canary.version not in self.service.versions.get(name, {}):
                self._set_canary(name, *(before or (None, 0.0)))  # it did not load: as before
            if failures:
                raise LoadFailed(f"model {name!r}: " + "; ".join(failures))

    def _unload(self, name: str, version: str | None) -> None:
        versions = self.service.versions.get(name, {})
        for gone in [version] if version is not None else list(versions):
            if gone in versions:
                self._remove(versions.pop(gone))
        if not versions:
            self.service.versions.pop(name, None)
        canary = self.service.canary.get(name)
        if canary is not None and canary[0] not in versions:
            self.service.canary.pop(name)
        self.service.publish()
        log.info("model unloaded", extra={"model": name, "version": version or "all"})

    def _set_canary(self, name: str, version: str | None, share: float) -> None:
        if version is None:
            self.service.canary.pop(name, None)
        else:
            self.service.canary[name] = (version, float(share))
        self.service.publish()  # the canary version is no model's default while it is one
        log.info("canary", extra={"model": name, "version": version, "share": share})

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
        (service.inference.dataplane.run); its queued requests finish, then it is freed."""
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
                    await self._apply_pending()

    # --- the workers' log -----------------------------------------------------------------------

    def _append(self, change: LoadChange | UnloadChange | CanaryChange) -> int:
        """Write `change` as the next entry of the log; its number. Written whole to a temporary
        file, then linked under its number (a link, unlike a rename, fails when another worker
        took that number): no worker ever reads a half-written entry."""
        self._log_dir.mkdir(parents=True, exist_ok=True)
        fd, staged = tempfile.mkstemp(dir=self._log_dir, prefix=".staged-")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(change.model_dump_json())
            while True:
                numbers = [int(p.stem) for p in self._log_dir.glob("*.json") if p.stem.isdigit()]
                number = max(numbers, default=0) + 1
                try:
                    os.link(staged, self._log_dir / f"{number:08d}.json")
                except FileExistsError:
                    continue  # another worker took that number
                return number
        finally:
            os.unlink(staged)

    def _pending(self) -> list[tuple[int, LoadChange | UnloadChange | CanaryChange | None]]:
        """The entries after the last one applied here, in order; None for one that cannot be
        read (empty, not JSON, not a change: written by hand or by an older writer that died
        mid-write), which is logged, counted and passed."""
        if not self._log_dir.is_dir():
            return []
        out: list[tuple[int, LoadChange | UnloadChange | CanaryChange | None]] = []
        for path in sorted(self._log_dir.glob("*.json")):
            if path.stem.isdigit() and int(path.stem) > self._applied:
                try:
                    out.append((int(path.stem), CHANGE.validate_json(path.read_bytes())))
                except (OSError, ValidationError) as exc:
                    log.error("unreadable entry of the workers' control log skipped",
                              extra={"entry": path.name, "error": str(exc).splitlines()[0]})
                    self.metrics.control_log_skipped.labels(reason="unreadable").inc()
                    out.append((int(path.stem), None))
        return out

    def _mark_applied(self, number: int) -> None:
        self._applied = number
        (self._log_dir / f"applied-{os.getpid()}").write_text(str(number))

    async def _wait_for_workers(self, number: int) -> None:
        """Return once every live worker applied entry `number`; ChangeNotApplied past
        WORKERS_WAIT_S (never an answer that says a change is done when it is not)."""
        deadline = time.monotonic() + WORKERS_WAIT_S
        while True:
            live = await asyncio.to_thread(self._live_applied)
            if len(live) >= self._group.expected and min(live, default=number) >= number:
                return
            if time.monotonic() >= deadline:
                break
            await asyncio.sleep(LOG_POLL_S / 2)
        behind = sum(1 for n in live if n < number) + max(0, self._group.expected - len(live))
        log.error("workers did not all apply a change in time", extra={"change": number, "behind": behind})
        raise ChangeNotApplied(f"{behind} of {self._group.expected} workers did not apply the change within "
                               f"{WORKERS_WAIT_S:g} s (entry {number} of the workers' log): the workers may "
                               "answer differently until they do; the index says what each one serves")

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
        """The entry a request for `name` naming no version runs on: the default (never the
        canary while another version is ready: Service.publish), except with a canary, which
        takes its share of them."""
        canary = self.service.canary.get(name)
        if canary is None or canary[1] <= 0:
            return default
        chosen = self.service.versions.get(name, {}).get(canary[0])
        if chosen is None or chosen.status != "ready":
            return default
        return chosen if random.random() < canary[1] else default
