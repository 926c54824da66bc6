"""The response cache (issue 54): a task endpoint's answer, kept in memory and served again to
the same request for the same load of the same model, as Triton's response cache does.

Off unless ATTSERVE_RESPONSE_CACHE_BYTES is set (> 0). Then:

- **The key** is the caller's tenant (with API keys on: the SHA-256 digest of its key, set by
  service.http.auth, never the key itself; None without keys), so one key's callers are never
  answered from, nor told by a hit about, what another key sent; then the resolved model's
  name, version and `load_id` (service.inference.registry: unique
  to each load of a bundle in this process, so an answer of one load, or of one version, is
  never served by another: a reload, which makes a new load, starts from an empty cache for
  that model), the endpoint, and the request normalized: the validated body's JSON without
  `model` (the model is in the key as resolved, so `"model": "x"` and no model share answers
  where x is the default), every field that changes the answer included with its default
  (inputs, explain, truncate, raw_scores, return_text, ...), in the schema's field order. An
  unknown field is dropped by validation and so is not in the key: it does not change the
  answer (its X-Attserve-Ignored-Fields header is made per request).
- **Only 200 answers** are stored: `answer` stores what it returns, and an error raises
  before that.
- **Bounded in bytes**, as Python holds them: each entry costs what sys.getsizeof counts of the
  objects it alone keeps alive (its key tuple, the request's JSON or body bytes, the answer's
  bytes, its headers dict, its value tuple) and ENTRY_OVERHEAD_BYTES for its place in the
  OrderedDict; the least recently used entries go first
  (`attserve_response_cache_evictions_total`); an answer larger than the whole budget is not
  stored.
- Answers carry `x-cache: hit` or `x-cache: miss`; the counters are
  `attserve_response_cache_{hits,misses,evictions}_total{model}` and the gauge
  `attserve_response_cache_bytes`.

A request whose body is byte for byte one answered before (the hot path's, service.http.entry) is
answered before its body is even validated: the raw bytes are a second key (`raw_hit`), which
remembers the model and version the body asked for and the load that answered; the model is
resolved again, and only an answer of the load it resolves to now is served (else the request
takes the normal path with that resolved load (state[RESOLVED]: a request draws a canary's
share once, service.inference.model_control.pick), misses and stores the new load's answer).
A hit counts as an answer of its version (`attserve_version_requests_total`), as a miss does. Same bytes, same validation:
nothing is skipped that could change the answer. Both kinds of entry share the LRU and the
byte budget (a raw entry costs its body bytes and its answer's, though the answer is shared).

Everything runs on the event loop (no lock): a lookup is a dict access and a move to the end.
Per process: with ATTSERVE_WORKERS each worker has its own cache.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from core.tasks import TASK_OF_LABEL
from service import tracing
from service.inference.dataplane import admit
from service.http.auth import TENANT

if TYPE_CHECKING:
    from service.metrics import Metrics
    from service.inference.registry import ModelEntry
    from service.settings import Settings

# what an entry costs beyond the objects sys.getsizeof counts (`_held`): its slot in the dict's
# table (which grows to 3x its entries before it is resized) and its node in the OrderedDict's
# order (measured with tracemalloc: tests/service/test_request_path_hardening.py)
ENTRY_OVERHEAD_BYTES = 160
CACHE_HEADER = "x-cache"
# request fields that are not part of the key: the model as named (the key has it as resolved)
NOT_KEYED = {"model", "version"}
# headers of an answer that belong to the request that ran it, not to the answer: not stored
TIMING_HEADERS = frozenset({"x-queue-time", "x-inference-time", CACHE_HEADER})
PER_REQUEST_HEADERS = TIMING_HEADERS | {"x-attserve-ignored-fields"}
# the first item of a raw body's key (normalized keys start with the model's name, a string)
RAW = None
# scope["state"] key of the load `raw_hit` resolved and did not serve: the request runs on it
# (routes.answer) instead of drawing the model's version again
RESOLVED = "attserve_resolved"
# routes.IGNORED_FIELDS_HEADER (not imported: routes imports this module)
IGNORED_HEADER = "X-Attserve-Ignored-Fields"
IGNORED_HEADER_LOWER = IGNORED_HEADER.lower()


class ResponseCache:
    def __init__(self, max_bytes: int, metrics: "Metrics") -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        # normalized key -> (answer, its headers but the timings and the ignored fields, which are
        # per request, its cost); raw key (RAW, endpoint, body bytes, tenant) -> (the same three,
        # (name, version, load_id) of the load that answered, (model, version) asked for, the
        # ignored-fields header: the same bytes ignore the same fields)
        self._entries: OrderedDict[tuple, tuple] = OrderedDict()
        self._metrics = metrics
        self._size = metrics.response_cache_bytes
        # (counter, model) -> its child, resolved once (labels() takes a lock and validates each call)
        self._children: dict[tuple[Any, str], Any] = {}

    @classmethod
    def from_settings(cls, settings: "Settings", metrics: "Metrics") -> "ResponseCache | None":
        return cls(settings.response_cache_bytes, metrics) if settings.response_cache_bytes > 0 else None

    def __len__(self) -> int:
        """The answers stored (not counting their raw-body keys)."""
        return sum(1 for key in self._entries if key[0] is not RAW)

    @staticmethod
    def key(entry: "ModelEntry", endpoint: str, body: Any, tenant: bytes | None = None) -> tuple:
        """The key of `body` (a validated request body) answered by `entry` at `endpoint` to
        `tenant` (service.http.auth.TENANT of the request's state; None without API keys)."""
        return (entry.name, ResponseCache.version_of(entry), entry.load_id, endpoint,
                body.model_dump_json(exclude=NOT_KEYED), tenant)

    def get(self, key: tuple) -> tuple[bytes, dict[str, str]] | None:
        """The answer stored under `key` and its headers (now the most recently used), None on
        a miss; counted."""
        stored = self._entries.get(key)
        if stored is None:
            self._count(self._metrics.response_cache_misses, key[0])
            return None
        self._entries.move_to_end(key)
        self._count(self._metrics.response_cache_hits, key[0])
        return stored[0], stored[1]

    def _count(self, counter: Any, model: str) -> None:
        child = self._children.get((counter, model))
        if child is None:
            child = self._children[(counter, model)] = counter.labels(model)
        child.inc()

    def raw_hit(self, service: Any, state: dict, endpoint: str, raw: bytes) -> tuple[bytes, dict[str, str]] | None:
        """The answer and headers of a body byte for byte one answered before, when the model it
        asks for resolves to the same load now; None otherwise (the caller takes the normal
        path, which counts the miss). A stored body is admitted here, by the dataplane, as the
        normal path would (503 while draining, the resolve's 404s: ServiceError, raised), once:
        on a miss the load is left in `state` for the normal path. `service`: the registry's
        Service; `state`: the request's."""
        key = (RAW, endpoint, raw, state.get(TENANT))
        stored = self._entries.get(key)
        if stored is None:
            return None
        content, headers, _, identity, (model, version), ignored = stored
        entry = admit(service, model, TASK_OF_LABEL[endpoint].name, version)
        if (entry.name, self.version_of(entry), entry.load_id) != identity:
            # another load answers now (or a canary's share drew another version): the normal
            # path runs on it, misses and stores its answer
            state[RESOLVED] = entry
            return None
        self._entries.move_to_end(key)
        self._count(self._metrics.response_cache_hits, entry.name)
        state["attserve_model"], state["attserve_model_version"] = entry.name, entry.version
        trace = tracing.current()
        if trace is not None:
            trace.cache = "hit"
        answer_headers = {**headers, CACHE_HEADER: "hit"}
        if ignored is not None:
            answer_headers[IGNORED_HEADER] = ignored
        return content, answer_headers

    @staticmethod
    def version_of(entry: "ModelEntry") -> str:
        return getattr(entry, "version", None) or (entry.config.version if entry.config else "")

    @staticmethod
    def cost(key: tuple, content: bytes, headers: dict[str, str] | None = None) -> int:
        """What a normalized entry counts against the budget (`put`'s figure): the objects it
        alone keeps alive, as sys.getsizeof counts them, and ENTRY_OVERHEAD_BYTES. Its model
        name, version and endpoint are the registry's own strings, not counted."""
        return _held(key, key[4], key[5], content, headers or {}, (None, None, None)) + ENTRY_OVERHEAD_BYTES

    def put(self, key: tuple, content: bytes, headers: dict[str, str], raw: bytes | None = None,
            requested: tuple[str | None, str | None] = (None, None)) -> None:
        """Store a 200 answer and its headers (less PER_REQUEST_HEADERS), and with `raw` (the
        body's bytes, from the hot path) a raw entry for byte-identical repeats, which asked for
        model and version `requested`; the least recently used go until they fit. Each entry
        keeps its cost, so an eviction does not count it again."""
        stable: dict[str, str] = {}
        ignored = None
        for name, value in headers.items():
            lowered = name.lower()
            if lowered not in PER_REQUEST_HEADERS:
                stable[name] = value
            elif lowered == IGNORED_HEADER_LOWER:
                ignored = value
        # the answer and its headers are shared by the two entries, and counted in each: either
        # may outlive the other
        answer_cost = _held(content, stable) + ENTRY_OVERHEAD_BYTES
        self._put(key, (content, stable, answer_cost + _held(key, key[4], key[5], (None, None, None))))
        if raw is not None:
            raw_key, identity = (RAW, key[3], raw, key[5]), key[:3]
            value = (content, stable, 0, identity, requested, ignored)
            cost = answer_cost + _held(raw_key, raw, value, identity, requested, ignored)
            self._put(raw_key, (*value[:2], cost, *value[3:]))
        self._size.set(self.bytes)

    def _put(self, key: tuple, value: tuple) -> None:
        cost = value[2]
        if cost > self.max_bytes:
            return
        old = self._entries.pop(key, None)
        if old is not None:  # two requests missed at once and both ran: keep the newer
            self.bytes -= old[2]
        while self.bytes + cost > self.max_bytes:
            evicted_key, evicted = self._entries.popitem(last=False)
            self.bytes -= evicted[2]
            self._count(self._metrics.response_cache_evictions,
                        evicted_key[0] if evicted_key[0] is not RAW else evicted[3][0])
        self._entries[key] = value
        self.bytes += cost


def _held(*objects: Any) -> int:
    """What sys.getsizeof counts of `objects` (None, small ints and interned strings are shared:
    their few bytes are counted anyway)."""
    return sum(map(sys.getsizeof, objects))
