"""Service settings: environment variables with the `ATTSERVE_` prefix (pydantic-settings).

Each setting is declared once, here: type, default, bounds and `Field(description=...)`. The
`attserve serve` / `python -m service` flags, which override the environment, and the tables of
docs/configuration.md (`python -m service.settings_doc --write`) are generated from them
(`setting_docs`); tests/unit/test_settings_docs.py fails when they differ. List settings take
comma-separated text, from the environment and from a flag alike.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Literal, NamedTuple, Optional

from pydantic import Field, SecretStr, create_model, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from core.tasks import TASKS

# An API key is a bearer token (RFC 6750's b64token), long enough not to be guessed.
MIN_KEY_CHARS = 16
_TOKEN = re.compile(rf"[A-Za-z0-9\-._~+/]{{{MIN_KEY_CHARS},}}=*")

# The bundled models shipped with the repository: <repo>/model_repository.
DEFAULT_MODEL_REPOSITORY = Path(__file__).resolve().parents[1] / "model_repository"

# Each setting's `json_schema_extra`: its group in docs/configuration.md and `attserve serve --help`,
# and, where the default alone does not say it, "default_text" (what None or a factory means) and
# "env_only" (why the setting has no `serve` flag).
SERVER = {"group": "Server"}
MODELS = {"group": "Models"}
BATCHING = {"group": "Batching"}
DEVICE = {"group": "Device and onnxruntime"}
LIMITS = {"group": "Request limits"}
CONNECTIONS = {"group": "HTTP connections"}
ENDPOINTS = {"group": "Endpoints and the response cache"}
TELEMETRY = {"group": "Logs, metrics and traces"}
SECURITY = {"group": "API keys and hosts"}
CONTROL = {"group": "Model control"}


def available_cpus() -> int:
    """CPUs this process may run on (affinity/cgroup-aware where the OS says, unlike
    os.cpu_count(), which onnxruntime would otherwise size its pool by)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _checked_keys(keys: list[SecretStr], source: str) -> list[SecretStr]:
    for i, key in enumerate(keys):  # the key itself is never part of the message
        if not _TOKEN.fullmatch(key.get_secret_value()):
            raise ValueError(f"{source}: key {i + 1}: use at least {MIN_KEY_CHARS} characters of A-Z a-z 0-9 - . _ ~ + / "
                             "(a bearer token, RFC 6750)")
    return keys


class _Settings(BaseSettings):
    # hide_input_in_errors: an invalid API key is not repeated in the error
    model_config = SettingsConfigDict(env_prefix="ATTSERVE_", extra="ignore", protected_namespaces=(),
                                      hide_input_in_errors=True)

    host: str = Field("127.0.0.1", description="Interface to listen on.", json_schema_extra=SERVER)
    port: int = Field(8000, ge=0, le=65535, description="TCP port to listen on.", json_schema_extra=SERVER)
    model_repository: Annotated[list[Path], NoDecode] = Field(
        default_factory=lambda: [DEFAULT_MODEL_REPOSITORY], min_length=1,
        description="Directory of bundles (every sub-directory with a `config.json`), or several separated by commas "
                    "or colons (`my-models,model_repository`), searched in order; a bundle name found twice stops "
                    "start-up.",
        json_schema_extra={**MODELS, "default_text": "the bundled `model_repository/`"})
    allow_partial_start: bool = Field(
        False, description="Serve the healthy bundles when one is invalid or fails to load (it is listed as failed, "
                           "`/health/ready` stays 503); without it such a deployment exits at start-up (code 2 for a "
                           "bad `config.json`, 3 for a file that fails to load), naming the file. A missing repository "
                           "or one with no bundle always stops start-up.",
        json_schema_extra=MODELS)
    models: Annotated[list[str] | None, NoDecode] = Field(
        None, description="Serve only these bundles: a comma-separated allow-list of bundle names. A name that does "
                          "not exist stops start-up (exit 2, the message lists the bundles that do).",
        json_schema_extra={**MODELS, "default_text": "all"})
    # default_<task>_model, one per task of core.tasks: see `Settings` below

    max_batch_size: int = Field(
        32, ge=1, description="Items per batch, per model: a batch closes at this many items, at "
                              "`ATTSERVE_MAX_BATCH_TOKENS` padded tokens, or `ATTSERVE_MAX_BATCH_DELAY_MS` after its "
                              "first item arrived.",
        json_schema_extra=BATCHING)
    max_batch_delay_ms: float = Field(
        0.0, ge=0, description="How long a batch may wait for company, from its first item. 0: continuous batching "
                               "(an idle engine takes what is queued at once, and items that arrive while a batch runs "
                               "form the next one), the fastest on CPU (`bench knobs`, docs/performance.md); a delay "
                               "pays off only where one engine call costs much more than the items in it (a GPU).",
        json_schema_extra=BATCHING)
    max_batch_tokens: int = Field(16384, ge=1, description="Padded tokens per batch (items x padded length).",
                                  json_schema_extra=BATCHING)
    call_overhead_tokens: float | None = Field(
        None, ge=0, description="What one more onnxruntime call is worth, in padded tokens: a batch whose items have "
                                "very different bucket shapes runs as the several calls that cost least, so short "
                                "items are not padded to the longest (`service.inference.runtime.plan_calls`; "
                                "docs/performance.md, \"How a request is served\"). 0: one call per shape; a huge "
                                "value: one call per batch.",
        json_schema_extra={**BATCHING, "default_text": "measured per model at warm-up (the \"model ready\" log gives it)"})
    max_queue: int = Field(1024, ge=1, description="Items (not requests) waiting per model before new requests get 429.",
                           json_schema_extra=BATCHING)
    request_timeout_ms: float = Field(
        30_000, gt=0, description="A request's deadline; its queued items past it are dropped before compute (504).",
        json_schema_extra=BATCHING)

    intra_op_threads: int | None = Field(
        None, ge=1, description="onnxruntime threads per session. Every model runs its batches on its own thread "
                                "concurrently, so the default shares the usable CPUs (affinity- and cgroup-aware) out "
                                "instead of giving each session all of them, which oversubscribes (onnxruntime #9800).",
        json_schema_extra={**DEVICE, "default_text": "usable cores / (models x workers)"})
    workers: int = Field(
        1, ge=1, le=64,
        description="Server processes behind the one port (`service/process/workers.py`), each with every model loaded "
                    "(memory x N). `/metrics` on any of them is the sum over all (prometheus-client multiprocess mode, "
                    "in `PROMETHEUS_MULTIPROC_DIR` or a fresh temporary directory), `/health/ready` is 200 only while "
                    "every worker is ready, a worker that dies is replaced, SIGTERM drains them all. Each worker "
                    "listens with its own `SO_REUSEPORT` socket, so the kernel spreads connections evenly (measured: "
                    "docs/performance.md). `ATTSERVE_MAX_CONNECTIONS` is per worker. On a GPU every worker holds its "
                    "own copy of the models on the device (its own onnxruntime sessions and CUDA arena).",
        json_schema_extra=SERVER)
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="`auto` (CUDA when onnxruntime-gpu and a GPU are present, else CPU), `cpu`, `cuda` (fails "
                            "at start without a GPU, and when onnxruntime would fall back to the CPU).",
        json_schema_extra=DEVICE)
    cuda_use_tf32: bool = Field(
        False, description="TF32 matrix products on CUDA (a CUDAExecutionProvider option, as the four below; ignored on "
                           "CPU). Off, unlike onnxruntime's default, because with it an answer depends on the batch it "
                           "ran in, and it made a fixed-shape call no faster (measured: docs/performance.md).",
        json_schema_extra=DEVICE)
    cuda_conv_algo_search: Literal["EXHAUSTIVE", "HEURISTIC", "DEFAULT"] = Field(
        "DEFAULT", description="cuDNN convolution algorithm search: `EXHAUSTIVE` (onnxruntime's default), `HEURISTIC`, "
                               "`DEFAULT`. `EXHAUSTIVE` re-benchmarks on every new shape, and the service's shapes "
                               "change from call to call (what each costs: docs/performance.md).",
        json_schema_extra=DEVICE)
    cuda_device_id: int = Field(0, ge=0, description="The GPU a worker's sessions run on.", json_schema_extra=DEVICE)
    cuda_arena_extend_strategy: Literal["kNextPowerOfTwo", "kSameAsRequested"] = Field(
        "kNextPowerOfTwo", description="How onnxruntime's GPU memory arena grows (`kSameAsRequested`: by what is "
                                       "asked). Not measured: whether it matters here.",
        json_schema_extra=DEVICE)
    cuda_mem_limit: int | None = Field(
        None, ge=1, description="A cap on onnxruntime's GPU memory arena, in bytes per session. Not measured: whether "
                                "it matters here.",
        json_schema_extra={**DEVICE, "default_text": "none (onnxruntime's: no cap)"})
    batch_grid: bool | None = Field(
        None, description="Pad each graph call's batch to a grid size (1, 2, 4, ... `ATTSERVE_MAX_BATCH_SIZE`) with "
                          "copies of its first row, as lengths are padded to buckets, so a session only sees the shapes "
                          "its warm-up ran; the padding rows are dropped before anything reads the outputs "
                          "(`service.inference.runtime`). Off on CPU, where it costs throughput (docs/performance.md, "
                          "\"On a GPU\").",
        json_schema_extra={**DEVICE, "default_text": "on for CUDA, off on CPU"})

    max_inputs_per_request: int = Field(64, ge=1, description="Items in one `inputs` request.",
                                        json_schema_extra=LIMITS)
    max_body_bytes: int = Field(1 << 20, ge=1, description="Request body limit, in bytes.", json_schema_extra=LIMITS)
    max_text_chars: int = Field(
        100_000, ge=1,
        description="Characters per text, before and after NFKC normalization (one character can become 18: U+FDFA, "
                    "and the tokenizer's time and memory follow the normalized length); a longer text is 422. Checked "
                    "in 4,096-character chunks before tokenizing (`core.tokenization.check_text`), so a refusal costs "
                    "at most the limit's worth of work.",
        json_schema_extra=LIMITS)
    max_request_chars: int = Field(
        1 << 18, ge=1,
        description="Characters after NFKC of all the texts of one request together (the default: 64 inputs of "
                    "4,096); more is 422. The largest accepted request, and several at once, stay bounded in time "
                    "and memory (docs/reliability.md, `python -m bench.reliability expansion`).",
        json_schema_extra=LIMITS)
    max_answer_bytes: int = Field(
        8 << 20, ge=1024,
        description="An answer's JSON over this many bytes is 422 `answer_too_large`. Explanations describe up to the "
                    "model's max length of tokens per text and a weight per token pair; 64 inputs of the bundled "
                    "verification model with five evidence sentences each stay well under the default (the largest "
                    "answer of the bundled models: docs/performance.md).",
        json_schema_extra=LIMITS)

    # service.http.http: uvicorn has no header-read timeout and, with httptools, no header size limit
    max_header_bytes: int = Field(16_384, ge=1024, description="Request line + headers, in bytes.",
                                  json_schema_extra=CONNECTIONS)
    header_timeout_s: float = Field(
        10.0, gt=0, description="Request line + headers must arrive within this from the connection's opening (its "
                                "first request: a connection that sends nothing is closed) or from a later request's "
                                "first byte; covers idle new connections and slowloris.",
        json_schema_extra=CONNECTIONS)
    body_timeout_s: float = Field(
        10.0, gt=0, description="The whole body must arrive within this from the end of the headers (else 408), and "
                                "within the request's deadline (else 504).",
        json_schema_extra=CONNECTIONS)
    keep_alive_timeout_s: float = Field(5.0, gt=0, description="An idle keep-alive connection is closed after this.",
                                        json_schema_extra=CONNECTIONS)
    write_timeout_s: float = Field(
        10.0, gt=0, description="A connection whose client acknowledges no byte of its answer for this long is "
                                "dropped, and the unsent answer freed (TCP_USER_TIMEOUT, Linux; a slow reader that "
                                "makes progress keeps its connection, as with nginx's `send_timeout`).",
        json_schema_extra=CONNECTIONS)
    max_connections: int = Field(
        4096, ge=1, description="Open connections, per worker (at most the file-descriptor limit less 128, a reserve "
                                "for model files and sockets); at the cap the oldest connection waiting for a request "
                                "is closed to make room, else the new one gets 503 at once.",
        json_schema_extra=CONNECTIONS)
    docs: bool = Field(
        False, description="`/docs` and `/redoc`; off by default because Swagger UI and ReDoc load their scripts from "
                           "a CDN (third-party scripts on the service's origin, blank pages without internet). "
                           "`/openapi.json` is always served.",
        json_schema_extra=ENDPOINTS)
    ui: bool = Field(
        True, description="`/ui`, the explanation page (its own static files from the package, no CDN, a strict "
                          "Content-Security-Policy).",
        json_schema_extra=ENDPOINTS)
    opentelemetry: bool = Field(
        False,
        description="FastAPI's native OpenTelemetry **metrics and logs** (HTTP request metrics, validation and error "
                    "logs) to the providers the process sets up (`FASTAPI_OTEL_AUTO_CONFIGURE=true` and the `OTEL_*` "
                    "variables create OTLP exporters; the serving image has `opentelemetry-api` only, so an exporter "
                    "needs the SDK: `.venv/bin/pip install -e '.[tracing]'`). Never FastAPI's spans: **traces are "
                    "`ATTSERVE_OTLP_ENDPOINT`'s**, the one way to trace the service (FastAPI's server span missed the "
                    "task endpoints' hot path, which skips FastAPI's routes, and two server spans per request would "
                    "make two traces of one). Off because the service's metrics are Prometheus' and, even with no "
                    "provider, the hook looks the providers up on every request (its cost: docs/performance.md).",
        json_schema_extra=TELEMETRY)
    otlp_endpoint: str | None = Field(
        None,
        description="OpenTelemetry traces (`service/tracing.py`) sent by OTLP/HTTP (protobuf) to this collector, "
                    "`http://collector:4318` (`/v1/traces` is added unless the URL ends with it; Jaeger, Tempo and the "
                    "OpenTelemetry Collector take it). One SERVER span per request to an inference endpoint or "
                    "`/tokenize` (`POST /entailment`), with the model (`attserve.model`, `attserve.model_version`), "
                    "the status, and each stage's milliseconds as attributes (`attserve.parse_ms`, "
                    "`attserve.tokenize_ms`, `attserve.queue_ms`, `attserve.inference_ms`, `attserve.serialise_ms`, "
                    "`attserve.batch_size`, `attserve.cache`) and as child spans (`parse`, `queue` with `tokenize` "
                    "inside it, `inference`, `serialise`); each batch is a `batch inference` span linked to every "
                    "request that ran in it. A caller's W3C `traceparent` is continued; a traced answer carries W3C's "
                    "`traceresponse` header (its trace id); a request refused by the Host or API key check is never "
                    "traced; the start-up log says `tracing on` with the URL and ratio (docs/tracing.md). No input "
                    "text goes into any span. Needs the SDK (`.venv/bin/pip install -e '.[tracing]'`; start-up fails naming it otherwise). "
                    "Unset: no SDK import and no cost per request; set, a measured cost per request "
                    "(docs/performance.md, \"Tracing, the response cache and /tokenize\").",
        json_schema_extra={**TELEMETRY, "default_text": "none (off)"})
    otlp_service_name: str = Field("attserve", description="The traces' `service.name`.", json_schema_extra=TELEMETRY)
    trace_sample_ratio: float = Field(
        1.0, ge=0, le=1,
        description="Share of the traces that start here that are kept, drawn before the SDK is called (an unsampled "
                    "request costs one random number); a caller's unsampled `traceparent` is followed, its sampled one "
                    "honoured beyond the ratio for at most `ATTSERVE_TRACE_FORCED_PER_S` requests a second. Tracing every request costs more than the bundled models' own inference: "
                    "below 1 cuts the cost about in proportion (docs/performance.md).",
        json_schema_extra=TELEMETRY)
    trace_forced_per_s: float = Field(
        10.0, ge=0, description="Requests a second whose caller's `traceparent` is sampled that are traced beyond "
        "the trace sample ratio (a token bucket: no caller makes every request pay for tracing); 0: a caller's "
        "sampled flag is kept only at the ratio (service.tracing).", json_schema_extra=TELEMETRY)
    otlp_timeout_s: float = Field(
        2.0, gt=0, description="Seconds an OTLP export may take, retries included, and the most a shutdown "
        "waits to flush the spans still buffered: a dead or hanging collector delays no SIGTERM past it.",
        json_schema_extra=TELEMETRY)
    slow_request_ms: float = Field(
        0.0, ge=0, description="A request to an inference endpoint that takes longer than this (ms, arrival to "
        "answer) is logged at WARNING with its stage times (queue, inference, the rest), status, model, "
        "version, cache and trace id; 0: off.", json_schema_extra=TELEMETRY)
    response_cache_bytes: int = Field(
        0, ge=0,
        description="The response cache (`service/http/cache.py`): task endpoint answers (200 only) kept in memory, "
                    "at most this many bytes as Python holds them (sys.getsizeof of each entry's key, request, answer "
                    "and headers, and its place in the LRU), least recently used out first, per "
                    "process (each worker has its own); 0: off. With API keys on, each key has its own answers (the "
                    "key holds a SHA-256 digest of the API key, never the key): one caller is never told what another "
                    "sent. The key is also the model's name, version and load (a "
                    "reload or a new version never serves an older answer) and the request as validated, without "
                    "`model` and with every field that changes the answer (inputs, `explain`, `truncate`, "
                    "`raw_scores`, `return_text`, ...); unknown fields are not in it; a body byte for byte one "
                    "answered before is also found by its bytes, before it is validated, while its model still "
                    "resolves to the load that answered. Answers say `x-cache: hit` or `miss` (a hit has no "
                    "`x-queue-time` / `x-inference-time`) and, hit or miss, count in `attserve_version_requests_total`; "
                    "a canary's share is drawn once per request; `attserve_response_cache_{hits,misses,evictions}_total{model}` "
                    "and `attserve_response_cache_bytes`. Worth it where inputs repeat; a miss costs a lookup and a "
                    "store (docs/performance.md).",
        json_schema_extra={**ENDPOINTS, "default_text": "0 (off)"})

    api_keys: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list,
        description=f"API keys, comma-separated, each at least {MIN_KEY_CHARS} characters of a bearer token's alphabet "
                    "(RFC 6750); "
                    "with any set, every route but `/health/live`, `/health/ready`, `/v2/health/live`, "
                    "`/v2/health/ready` (and `/metrics`, see `ATTSERVE_METRICS_REQUIRE_KEY`) answers 401 without "
                    "`Authorization: Bearer <key>`. `/ui` and `/docs` need one too, which a browser does not send: use "
                    "them where no keys are set. Compared in constant time (SHA-256 digests, `hmac.compare_digest`), "
                    "never logged (`SecretStr`); read once at start (`service/http/auth.py`). Compose passes them from "
                    "an `.env` file (docker/README.md), Kubernetes from the optional Secret `attserve-api-keys`.",
        json_schema_extra={**SECURITY, "default_text": "none",
                           "env_only": "a command line is visible to every user of the host (`ps`); use the "
                                       "variable or `--api-keys-file`"})
    api_keys_file: Path | None = Field(
        None, description="A file of API keys, one per line (`#` starts a comment; a Docker or Kubernetes secret), read "
                          "once at start, added to `ATTSERVE_API_KEYS`.",
        json_schema_extra=SECURITY)
    metrics_require_key: bool = Field(
        False, description="`/metrics` needs an API key too (give Prometheus one: `authorization.credentials_file` "
                           "in its scrape config).",
        json_schema_extra=SECURITY)
    allowed_hosts: Annotated[list[str] | None, NoDecode] = Field(
        None, description="Host names (comma-separated, `*.example.com` for subdomains) the Host header must name on "
                          "the routes API keys protect (the same exceptions), else 400 `invalid_host`: against DNS "
                          "rebinding, as a web page that points its own name at this server's address still sends "
                          "its own name. Compose sets `localhost,127.0.0.1,[::1]` (its port is published on "
                          "127.0.0.1 only).",
        json_schema_extra={**SECURITY, "default_text": "any"})

    model_control_mode: Literal["none", "explicit", "poll"] = Field(
        "none", description="Models changed while serving (`service.inference.model_control`, docs/model-control.md): "
                            "`none` (the models found at start serve until the process ends), `explicit` (the Open "
                            "Inference Protocol's repository API, `POST /v2/repository/models/{name}/load` and "
                            "`/unload`, loads, reloads and unloads them), `poll` (the repository folders are scanned "
                            "every `ATTSERVE_REPOSITORY_POLL_S`; a new, changed or removed bundle is loaded, reloaded "
                            "or unloaded by itself).",
        json_schema_extra=CONTROL)
    repository_poll_s: float = Field(5.0, gt=0, description="Poll mode: seconds between two scans of the repository "
                                                            "folders.", json_schema_extra=CONTROL)
    control_api_keys: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list,
        description="Keys of the repository API (`/v2/repository/*`), as `ATTSERVE_API_KEYS`; with any set, the "
                    "repository API needs one of them and no task key opens it (a key that may classify may not "
                    "change the models). Required in explicit mode when `ATTSERVE_API_KEYS` are set; explicit mode "
                    "without them logs a WARNING at start-up (the repository API is then open to any client that "
                    "reaches the port).",
        json_schema_extra={**CONTROL, "default_text": "none",
                           "env_only": "a command line is visible to every user of the host (`ps`); use the "
                                       "variable or `--control-api-keys-file`"})
    control_api_keys_file: Path | None = Field(
        None, description="A file of repository API keys, one per line (as `ATTSERVE_API_KEYS_FILE`), added to "
                          "`ATTSERVE_CONTROL_API_KEYS`.",
        json_schema_extra=CONTROL)
    canary: Annotated[dict[str, tuple[str, float]], NoDecode] = Field(
        default_factory=dict,
        description="A share of the requests that name no version of a model sent to another version, to compare "
                    "them before switching: `name=version:share`, comma-separated (`fever-attconv=2:0.1`; share 0: "
                    "the version is staged and takes none); the rest run on the newest other ready version, the "
                    "default, which the canary never is while another version is ready. Compared in "
                    "`attserve_version_requests_total`; explicit "
                    "mode changes it with `POST /v2/repository/models/{name}/canary`.",
        json_schema_extra={**CONTROL, "default_text": "none"})

    memory_trim_s: float = Field(
        10.0, ge=0, description="How often (seconds) the memory requests freed is handed back to the OS (glibc "
                                "`malloc_trim`, in a thread; 0: never). glibc returns only the top of its heaps by "
                                "itself, so a burst of large requests would leave the process larger for good "
                                "(`service.http.app`; measured: docs/performance.md).",
        json_schema_extra=SERVER)
    shutdown_timeout_s: float = Field(
        30.0, ge=0, description="SIGTERM drain: queued and in-flight work must finish within this many seconds.",
        json_schema_extra=SERVER)
    log_level: str = Field("INFO", description="Level of the service's log lines, which are JSON lines (a Python "
                                               "logging level: `DEBUG`, `INFO`, `WARNING`, ...).",
                           json_schema_extra=TELEMETRY)
    access_log: bool = Field(False, description="uvicorn's access log: one log line per HTTP request.",
                             json_schema_extra=TELEMETRY)

    @field_validator("models", mode="before")
    @classmethod
    def _split_models(cls, value: object) -> object:
        if isinstance(value, str):
            names = [v.strip() for v in value.split(",") if v.strip()]
            return names or None
        return value

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _split_hosts(cls, value: object) -> object:
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()] or None
        return value

    @field_validator("model_repository", mode="before")
    @classmethod
    def _split_repositories(cls, value: object) -> object:
        if isinstance(value, (str, Path)):
            value = [value]
        if isinstance(value, (list, tuple)):
            paths: list[object] = []
            for item in value:
                if isinstance(item, str):
                    paths += [part.strip() for part in item.replace(":", ",").split(",") if part.strip()]
                else:
                    paths.append(item)
            return paths
        return value

    @field_validator("api_keys", "control_api_keys", mode="before")
    @classmethod
    def _split_api_keys(cls, value: object) -> object:
        if isinstance(value, (str, SecretStr)):
            raw = value.get_secret_value() if isinstance(value, SecretStr) else value
            return [k.strip() for k in raw.split(",") if k.strip()]
        return value

    @field_validator("api_keys", "control_api_keys")
    @classmethod
    def _check_api_keys(cls, keys: list[SecretStr], info) -> list[SecretStr]:
        # after the SecretStr conversion: an error shows the input as '**********'
        return _checked_keys(keys, env_var(info.field_name))

    @model_validator(mode="after")
    def _read_api_keys_file(self) -> "_Settings":
        for keys_field, file_field in (("api_keys", "api_keys_file"), ("control_api_keys", "control_api_keys_file")):
            path = getattr(self, file_field)
            if path is None:
                continue
            try:
                lines = path.read_text(encoding="utf-8").splitlines()
            except (OSError, UnicodeDecodeError) as exc:
                raise ValueError(f"{file_field} {path}: cannot read it ({type(exc).__name__})") from None
            keys = [SecretStr(line.strip()) for line in lines if line.strip() and not line.lstrip().startswith("#")]
            if not keys:
                raise ValueError(f"{file_field} {path} holds no key (one per line)")
            setattr(self, keys_field, [*getattr(self, keys_field), *_checked_keys(keys, str(path))])
        if self.api_keys and self.model_control_mode == "explicit" and not self.control_api_keys:
            raise ValueError("model_control_mode=explicit with api_keys set needs control_api_keys (or "
                             "control_api_keys_file): the repository API takes keys of its own")
        return self

    @field_validator("canary", mode="before")
    @classmethod
    def _parse_canary(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        out: dict[str, tuple[str, float]] = {}
        for part in (p.strip() for p in value.split(",") if p.strip()):
            name, _, rest = part.partition("=")
            version, _, share = rest.rpartition(":")
            try:
                out[name.strip()] = (version.strip(), float(share))
            except ValueError:
                raise ValueError(f"canary: {part!r} is not name=version:share (fever-attconv=2:0.1)") from None
        return out

    @field_validator("canary")
    @classmethod
    def _check_canary(cls, value: dict[str, tuple[str, float]]) -> dict[str, tuple[str, float]]:
        for name, (version, share) in value.items():
            if not name or not version or not 0 <= share <= 1:
                raise ValueError(f"canary: {name}={version}:{share}: a model, a version and a share in [0, 1]")
        return value

    @field_validator("otlp_endpoint")
    @classmethod
    def _check_otlp_endpoint(cls, value: str | None) -> str | None:
        if value is None or not value.strip():  # set but empty (a compose default): off
            return None
        if not re.fullmatch(r"https?://[^/\s]+(/\S*)?", value.strip()):
            raise ValueError("otlp_endpoint: an http:// or https:// URL of an OTLP/HTTP collector "
                             "(http://collector:4318)")
        return value.strip()

    @field_validator("log_level")
    @classmethod
    def _upper_level(cls, value: str) -> str:
        return value.upper()

    def default_model(self, task: str) -> str | None:
        return getattr(self, f"default_{task}_model")

    def cuda_provider_options(self) -> dict[str, str]:
        """The CUDAExecutionProvider options handed to onnxruntime (strings, as it reports them)."""
        options = {"device_id": str(self.cuda_device_id), "use_tf32": "1" if self.cuda_use_tf32 else "0",
                   "cudnn_conv_algo_search": self.cuda_conv_algo_search,
                   "arena_extend_strategy": self.cuda_arena_extend_strategy}
        if self.cuda_mem_limit is not None:
            options["gpu_mem_limit"] = str(self.cuda_mem_limit)
        return options

    def batch_grid_for(self, provider: str) -> bool:
        """Whether batches are padded to the batch-size grid on `provider`."""
        if self.batch_grid is not None:
            return self.batch_grid
        return provider == "CUDAExecutionProvider"

    def threads_per_model(self, model_count: int) -> int:
        """intra-op threads of each session. Every model runs its batches on its own thread
        concurrently, so the default shares the CPUs out instead of giving each session all
        of them (onnxruntime's default, which oversubscribes: onnxruntime #9800), and so
        do the workers."""
        if self.intra_op_threads is not None:
            return self.intra_op_threads
        return max(1, available_cpus() // (max(1, model_count) * self.workers))


# Default model per task (ATTSERVE_DEFAULT_<TASK>_MODEL, one per task of core.tasks).
Settings = create_model(
    "Settings", __base__=_Settings, __module__=__name__,
    **{f"default_{task}_model": (Optional[str], Field(
        None, description=f"The model `{TASKS[task].endpoint}` answers with when a request names none; a name that "
                          f"is not a served {task} model stops start-up.",
        json_schema_extra={**MODELS, "default_text": "the bundle of the task marked `\"default\": true`, else the "
                                                     "best recorded test accuracy (ties: name order; the start-up log "
                                                     "and `/v1/models` say so)"}))
       for task in TASKS},
)


class SettingDoc(NamedTuple):
    """One setting as docs/configuration.md and `attserve serve --help` describe it."""

    name: str
    env_var: str
    flag: str | None  # None: env only
    group: str
    default: str  # markdown
    description: str  # markdown
    env_only: str | None  # why there is no flag


def _default_markdown(field: FieldInfo, extra: dict) -> str:
    if "default_text" in extra:
        return extra["default_text"]
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"`{value}`"


def env_var(name: str) -> str:
    """The environment variable of a Settings field: max_body_bytes -> ATTSERVE_MAX_BODY_BYTES."""
    return f"{Settings.model_config['env_prefix']}{name.upper()}"


def setting_docs() -> list[SettingDoc]:
    """Every field of Settings, grouped (groups in the order they first appear, fields in declaration order)."""
    docs = []
    for name, field in Settings.model_fields.items():
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        env_only = extra.get("env_only")
        docs.append(SettingDoc(name=name, env_var=env_var(name),
                               flag=None if env_only else "--" + name.replace("_", "-"),
                               group=extra.get("group", "Other"), default=_default_markdown(field, extra),
                               description=field.description or "", env_only=env_only))
    groups = list(dict.fromkeys(doc.group for doc in docs))
    return sorted(docs, key=lambda doc: groups.index(doc.group))
