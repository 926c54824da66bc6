"""The model registry: the served models (their bundles, runtimes and engines), start-up
discovery and loading, each task's default model, and resolving the model a request runs on.
Knows nothing of HTTP: the routes (service.http.routes, service.http.oip) and the app (service.http.app)
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
import dataclasses
import gc
import itertools
import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from core.bundle import CONFIG_FILE, MAX_CONFIG_BYTES, BundleConfig, BundleError, read_config
from core.tasks import TASKS
from service.inference.engine import Engine, warm_up
from service.inference.errors import NoModelForTask, NotReady, UnknownModel, WrongTask, excerpt
from service.metrics import Metrics
from service.inference.runtime import DeviceUnavailable, ModelRuntime, load_runtime, requested_providers
from service.settings import Settings, available_cpus
from service.tracing import Tracing

log = logging.getLogger("service.inference.registry")
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


def version_order(version: str) -> tuple:
    """Sort key of version labels, oldest first: numbered versions (Triton's folders) by number,
    after them any other label (a bundle's own `version`) by text."""
    return (0, int(version), "") if version.isdigit() else (1, 0, version)


def fingerprint(path: Path) -> tuple:
    """What says a bundle's files changed: each file's name, size, modification time and inode
    (a file replaced by a rename within the same clock tick is a new inode)."""
    try:
        return tuple(sorted((f.name, s.st_size, s.st_mtime_ns, s.st_ino)
                            for f in path.iterdir() if f.is_file() for s in [f.stat()]))
    except OSError:
        return ()


# A version folder's name: it becomes a version label in URLs and response headers.
VERSION_FOLDER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


# config.json path -> (its file's signature, what reading it gave): the last read of each file only,
# so a file changed a thousand times holds one entry (a cache keyed on the signature would keep all)
_CONFIGS: dict[Path, tuple[tuple, tuple[BundleConfig | None, str | None]]] = {}
_MAX_CONFIGS_KEPT = 4096


def config_on_disk(path: Path) -> tuple[BundleConfig | None, str | None]:
    """The config.json at `path`, or why it cannot be read. Parsed again only when the file
    changed (its inode, size or modification time): the repository index reads every bundle's
    config on the event loop at each call; one over MAX_CONFIG_BYTES is refused unread."""
    try:
        stat = path.stat()
    except OSError as exc:
        return None, f"{path}: not readable ({exc.strerror or type(exc).__name__})"
    if stat.st_size > MAX_CONFIG_BYTES:
        return None, f"{path}: {stat.st_size} bytes, over the {MAX_CONFIG_BYTES} a bundle config may hold"
    signature = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
    cached = _CONFIGS.get(path)
    if cached is not None and cached[0] == signature:
        return cached[1]
    try:
        result: tuple[BundleConfig | None, str | None] = (read_config(path), None)
    except BundleError as exc:
        result = (None, str(exc))
    if len(_CONFIGS) >= _MAX_CONFIGS_KEPT:  # folders come and go: forget them all now and then
        _CONFIGS.clear()
    _CONFIGS[path] = (signature, result)
    return result


@dataclass(frozen=True)
class BundleOnDisk:
    """One version of a model as the repository holds it: a directory with a config.json
    (`<repository>/<dir>/config.json`, its version the config's `version`) or a version folder
    (`<repository>/<dir>/<version>/config.json`, the folder's name its version: Triton's `1`,
    `2`, ..., or a label such as a flat bundle's own version)."""

    path: Path
    folder_version: str | None  # the version folder's name; None for a bundle at the top
    config: BundleConfig | None
    error: str | None  # why it may not be loaded: its config.json is unreadable, or the layout is refused
    fingerprint: tuple

    @property
    def name(self) -> str:
        return self.config.name if self.config is not None else self.path.name if self.folder_version is None \
            else self.path.parent.name

    @property
    def version(self) -> str:
        if self.folder_version is not None:
            return self.folder_version
        return (self.config.version if self.config is not None else "") or "1"


def bundles_on_disk(repositories: list[Path]) -> list[BundleOnDisk]:
    """Every bundle of the `repositories` that exist. In each, every non-hidden sub-directory is
    a model's folder: a bundle itself when it holds a config.json, and its non-hidden
    sub-directories that hold one are version folders (export stages its work in hidden
    directories). What `refuse_layouts` refuses carries its reason in `error`."""
    out = []
    for repository in (r for r in repositories if r.is_dir()):
        for top in sorted(p for p in repository.iterdir() if p.is_dir() and not p.name.startswith(".")):
            places = [(top, None)] if (top / CONFIG_FILE).is_file() else []
            places += [(p, p.name) for p in sorted(top.iterdir(), key=lambda p: version_order(p.name))
                       if p.is_dir() and not p.name.startswith(".") and (p / CONFIG_FILE).is_file()]
            for path, folder_version in places:
                config, error = config_on_disk(path / CONFIG_FILE)
                out.append(BundleOnDisk(path, folder_version, config, error, fingerprint(path)))
    return refuse_layouts(out)


def refuse_layouts(bundles: list[BundleOnDisk]) -> list[BundleOnDisk]:
    """`bundles`, each that may not be loaded because of where it lies with the reason in its
    `error`: a bundle at the top of a model's folder beside version folders (which versions
    would the model have?), a version folder whose name cannot be a version label, and one
    model name and version in several folders (which one would serve?)."""
    reasons: dict[Path, str] = {}
    by_folder: dict[Path, list[BundleOnDisk]] = {}
    for b in bundles:
        by_folder.setdefault(b.path if b.folder_version is None else b.path.parent, []).append(b)
    for folder, group in by_folder.items():
        flat = next((b for b in group if b.folder_version is None), None)
        versions = [b.folder_version for b in group if b.folder_version is not None]
        if flat is not None and versions:
            label = flat.config.version if flat.config is not None and VERSION_FOLDER.fullmatch(flat.config.version) \
                else "<its version>"
            reason = (f"{folder}: a bundle (config.json) beside version folders ({', '.join(versions)}): move its "
                      f"files into {folder / label}/ (its version keeps its name) or the version folders out")
            reasons.update({b.path: reason for b in group})
    for b in bundles:
        if b.folder_version is not None and not VERSION_FOLDER.fullmatch(b.folder_version):
            reasons.setdefault(b.path, f"{b.path}: the folder's name is no version label (at most 64 of A-Z a-z "
                                       "0-9 . _ -, a letter or digit first)")
    by_version: dict[tuple[str, str], list[BundleOnDisk]] = {}
    for b in bundles:
        if b.config is not None:
            by_version.setdefault((b.name, b.version), []).append(b)
    for (name, version), group in by_version.items():
        if len(group) > 1:
            reason = (f"model {name!r} version {version!r} is in {len(group)} folders "
                      f"({', '.join(str(b.path) for b in group)}): one folder per version; remove or rename the others")
            for b in group:
                reasons.setdefault(b.path, reason)
    return [dataclasses.replace(b, error=reasons[b.path]) if b.path in reasons else b for b in bundles]


@dataclass
class ModelEntry:
    """One version of a model: its bundle, and once loaded its runtime and engine."""

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
    # the version label (BundleOnDisk.version) and the files it was loaded from
    version: str = ""
    fingerprint: tuple = ()
    # why the last reload of this version failed, while this load keeps serving (model control)
    reason: str | None = None
    # taken out of service (service.inference.model_control): a request that resolved it before goes to
    # `replaced_by`, the new load of the same version, if there is one
    retired: bool = False
    replaced_by: "ModelEntry | None" = None

    @property
    def task(self) -> str | None:
        return self.config.task if self.config else None

    @property
    def state(self) -> str:
        """The repository index's state (Triton's names)."""
        return {"ready": "READY", "loading": "LOADING"}.get(self.status, "UNAVAILABLE")


class Service:
    """Everything the routes need: settings, metrics, models, and the drain flag."""

    def __init__(self, settings: Settings, *, response_cache: Callable[[Settings, Metrics], Any] | None = None,
                 tracing: Tracing | None = None) -> None:
        self.settings = settings
        self.metrics = Metrics()
        # the answers' cache, made from the settings and these metrics by `response_cache`
        # (service.http.cache.ResponseCache.from_settings: it keys on a request's bytes, so the HTTP
        # layer owns the class); None when off
        self.response_cache = response_cache(settings, self.metrics) if response_cache is not None else None
        # OpenTelemetry traces (service.tracing.Tracing.from_settings); None unless ATTSERVE_OTLP_ENDPOINT is set
        self.tracing = tracing
        self.providers = requested_providers(settings.device)  # DEVICE=cuda without CUDA fails here
        # name -> version -> entry: every version of every model
        self.versions: dict[str, dict[str, ModelEntry]] = {}
        # name -> the version a request that names none runs on (`publish`)
        self.models: dict[str, ModelEntry] = {}
        self.discovered = False
        self.loaded = False
        # the entry a request naming no version runs on, given the default (a canary's share:
        # service.inference.model_control); None: the default
        self.pick: Callable[[str, ModelEntry], ModelEntry] | None = None
        # name -> (version, share): the canary of a model (ATTSERVE_CANARY; the repository API
        # changes it). Its version is not the model's default while another version is ready.
        self.canary: dict[str, tuple[str, float]] = dict(settings.canary)
        # every task a model was served for: one left without a model holds /health/ready at 503
        self.tasks_served: set[str] = set()
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
        """Every bundle of every repository (`bundles_on_disk`): each version of each model.

        Raises StartupError when a repository is missing or holds no bundle, when an
        allow-listed model does not exist (the message lists those that do), or, unless
        `allow_partial_start`, when a bundle's config.json is invalid or its layout refused (one
        name and version in two folders, a bundle beside version folders: `refuse_layouts`)."""
        self.discovered = True
        problems: list[str] = []
        allow = set(self.settings.models) if self.settings.models else None
        found: list[str] = []  # every bundle name (or directory name, when its config is broken)
        for repo in self.repositories:
            if not repo.is_dir():
                log.error("model repository not found", extra={"path": str(repo)})
                problems.append(f"model repository {repo} is not a directory")
        for bundle in bundles_on_disk(self.repositories):
            found.append(bundle.name)
            if allow is not None and bundle.name not in allow:
                continue
            entry = ModelEntry(bundle.name, bundle.path, bundle.config, version=bundle.version,
                               fingerprint=bundle.fingerprint)
            taken = self.versions.get(bundle.name, {})
            if bundle.version in taken:  # a second folder of one name and version (refused): listed apart
                entry.name = f"{bundle.name}@{bundle.path.parent.name}/{bundle.path.name}"
            if bundle.error is not None:
                self._fail(entry, bundle.error)
                continue
            other_task = next((e.task for e in taken.values() if e.task not in (None, bundle.config.task)), None)
            if other_task is not None:
                self._fail(entry, f"{bundle.path / CONFIG_FILE}: model {bundle.name!r} does {other_task} in its "
                                  f"other versions, this one {bundle.config.task}")
                continue
            self.versions.setdefault(bundle.name, {})[bundle.version] = entry
        self.publish()
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
        broken = [e for e in self.all_entries() if e.status == "failed"]
        if broken and not problems and not self.settings.allow_partial_start:
            # dict.fromkeys: one reason shared by several folders (one name and version in two) said once
            raise StartupError("cannot start: " + "; ".join(dict.fromkeys(e.error or e.name for e in broken)) +
                               " (set ATTSERVE_ALLOW_PARTIAL_START=true to serve the healthy bundles anyway)")
        if problems:
            raise StartupError("cannot start: " + "; ".join(problems))
        for task in TASKS:
            name, reason = self.default_choice(task)
            if name is not None and sum(1 for e in self.models.values() if e.task == task) > 1:
                log.info("default model", extra={"task": task, "model": name, "reason": reason})

    def all_entries(self) -> list[ModelEntry]:
        """Every version of every model."""
        return [e for versions in self.versions.values() for e in versions.values()]

    def version_index(self, name: str) -> list[dict]:
        """Each version of model `name`, oldest first: its state, why it is not ready (or why
        its last reload failed while it serves on), whether it is the default (it takes the
        requests naming no version that a canary does not) and the share of those it takes."""
        default = self.models.get(name)
        shares = self.traffic(name)
        return [{"version": e.version, "state": e.state, "reason": e.reason or e.public_error or "",
                 "default": e is default, "traffic": shares.get(e.version, 0.0)}
                for e in sorted(self.versions.get(name, {}).values(), key=lambda e: version_order(e.version))]

    def traffic(self, name: str) -> dict[str, float]:
        """version -> the share of the requests for `name` naming no version it answers."""
        default = self.models.get(name)
        if default is None or default.status != "ready":
            return {}
        version, share = self.canary.get(name, ("", 0.0))
        canary = self.versions.get(name, {}).get(version)
        if canary is None or canary is default or canary.status != "ready" or share <= 0:
            return {default.version: 1.0}
        return {default.version: round(1.0 - share, 6), version: share}

    def publish(self) -> None:
        """Recompute `models`, what requests naming no version run on: each model's newest ready
        version, else its newest (a request then hears that it is loading or failed). Replaced
        whole, so a request reads either the old mapping or the new one."""
        published = {}
        for name, versions in self.versions.items():
            if not versions:
                continue
            ordered = sorted(versions.values(), key=lambda e: version_order(e.version), reverse=True)
            canary = self.canary.get(name, ("",))[0]
            published[name] = next((e for e in ordered if e.status == "ready" and e.version != canary),
                                   next((e for e in ordered if e.status == "ready"), ordered[0]))
        self.models = published
        self.tasks_served |= {e.task for e in published.values() if e.task is not None and e.status != "failed"}

    def _fail(self, entry: ModelEntry, message: str) -> None:
        entry.status, entry.error = "failed", message
        entry.public_error = public_message(message, self.repositories)
        self.versions.setdefault(entry.name, {})[entry.version] = entry
        self.publish()
        log.error("model failed to load", extra={"model": entry.name, "version": entry.version, "error": message})

    async def load_all(self) -> None:
        pending = [e for e in self.all_entries() if e.status == "loading"]
        # One load (session, warm-up) keeps its session's intra-op threads busy: as many at once
        # as the CPUs hold (the eight bundled models on 2 cores: 2, where one left a core idle
        # for the whole start-up); one at a time on a GPU, whose warm-ups would share the device.
        on_gpu = any(p != "CPUExecutionProvider" for p in self.providers)
        threads = self.settings.threads_per_model(len(pending)) * self.settings.workers
        slots = asyncio.Semaphore(1 if on_gpu else max(1, available_cpus() // threads))

        async def load(entry: ModelEntry) -> None:
            async with slots:
                error = await self.load_entry(entry)
            if error is not None:
                self._fail(entry, error)
            self.publish()  # each model serves as soon as it is warm

        await asyncio.gather(*(load(entry) for entry in pending))
        self.loaded = True
        failed = [e for e in self.all_entries() if e.status == "failed"]
        if failed and not self.settings.allow_partial_start:
            self.fatal = "cannot start: " + "; ".join(e.error or e.name for e in failed) + \
                " (set ATTSERVE_ALLOW_PARTIAL_START=true to serve the healthy bundles anyway)"
            log.error("start-up failed", extra={"failed": sorted({e.name for e in failed})})
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

    def session_threads(self, entry: ModelEntry) -> int:
        """intra-op threads of `entry`'s session, one rule at start and at every load after it:
        the CPUs shared out (Settings.threads_per_model) over the versions served or loading,
        `entry`'s own counted once."""
        live = {(e.name, e.version) for e in self.all_entries() if e.status != "failed"}
        return self.settings.threads_per_model(len(live | {(entry.name, entry.version)}))

    async def load_entry(self, entry: ModelEntry) -> str | None:
        """Load `entry`'s session, warm it up over every shape it can be run at, and start its
        engine: it is then ready to take traffic (`publish` makes it the default). The error
        instead, when it cannot be loaded (or its config.json changed since it was read); `entry`
        is left as it was."""
        threads = self.session_threads(entry)
        try:
            runtime = await asyncio.to_thread(load_runtime, entry.path, self.settings, threads)
            if runtime.config != entry.config:  # the entry's name, version and task are the config read first
                return f"{entry.path / CONFIG_FILE}: changed between the repository scan and the load; load it again"
            seconds = await asyncio.to_thread(warm_up, runtime, self.settings)
        except (BundleError, DeviceUnavailable) as exc:
            return str(exc)
        except Exception as exc:  # a broken graph may fail at warm-up with onnxruntime's own errors
            return f"{entry.path}: {type(exc).__name__}: {exc}"
        entry.runtime = runtime
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
            "model": entry.name, "version": entry.version, "task": c.task, "architecture": c.architecture,
            "provider": entry.runtime.provider, "provider_options": entry.runtime.provider_options,
            "intra_op_threads": threads, "warmup_s": round(seconds, 3),
            "warmup_shapes": entry.runtime.warmup_report["shapes"], "batch_grid": entry.runtime.batch_sizes,
            "call_overhead_tokens": round(entry.runtime.call_overhead_tokens, 1),
        })
        return None

    @property
    def ready(self) -> bool:
        return self.unready_reason() is None

    def unready_reason(self) -> str | None:
        """Why the service is not ready (/health/ready and the protocol's say it), None when it
        is: every model loaded and warm, and every task it served still has a model."""
        if self.draining:
            return "the server is shutting down"
        if not self.loaded:
            loading = ", ".join(f"{n}: {e.status}" for n, e in sorted(self.models.items()))
            return "models not loaded yet" + (f" ({loading})" if loading else "")
        if not self.models:
            return "no model is loaded"
        waiting = {n: e.status for n, e in sorted(self.models.items()) if e.status != "ready"}
        if waiting:
            return f"models not ready: {waiting}"
        orphaned = sorted(t for t in self.tasks_served if self.default_name(t) not in self.models)
        if orphaned:
            return (f"no model serves {', '.join(orphaned)} any more (unloaded): its endpoint answers 404 until a "
                    "model of it is loaded")
        return None

    # --- routing ------------------------------------------------------------------------

    def default_choice(self, task: str) -> tuple[str | None, str | None]:
        """The model a request of `task` that names none runs on, and why it is that one."""
        wanted = self.settings.default_model(task)
        if wanted:
            # once unloaded it is no default (its task's requests get 404, not 422 for a model gone)
            if self.discovered and wanted not in self.models:
                return None, None
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

    def resolve(self, name: str | None, task: str, version: str | None = None) -> ModelEntry:
        """The model a request runs on (the newest ready version, unless `version` names one);
        422 for an unknown model, version or one of another task, 404 when no model of the
        task is served, 503 for one still loading or failed."""
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
        if version is not None:
            entry = self.versions.get(name, {}).get(version)
            if entry is None:
                known = sorted(self.versions.get(name, {}), key=version_order)
                raise UnknownModel(f"model {name!r} has no version {excerpt(version)}; its versions: {known}")
        elif self.pick is not None:
            entry = self.pick(name, entry)
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
        engines = [e.engine for e in self.all_entries() if e.engine is not None]
        await asyncio.gather(*(engine.drain(deadline - time.monotonic()) for engine in engines))
        log.info("stopped", extra={"drain_s": round(time.monotonic() - self._drain_started, 3)})
