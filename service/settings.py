"""Service settings: environment variables with the `ATTSERVE_` prefix (pydantic-settings).

`ATTSERVE_MODELS` takes a comma-separated allow-list (`topic,sentiment`),
`ATTSERVE_MODEL_REPOSITORY` one directory or several, separated by commas or colons
(`model_repository,/srv/my-bundles`), `ATTSERVE_API_KEYS` and `ATTSERVE_ALLOWED_HOSTS`
comma-separated lists; every other field is a plain scalar. `attserve serve` / `python -m service` options override the environment.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Literal, Optional

from pydantic import Field, SecretStr, create_model, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from core.tasks import TASKS

# An API key is a bearer token (RFC 6750's b64token), long enough not to be guessed.
MIN_KEY_CHARS = 16
_TOKEN = re.compile(rf"[A-Za-z0-9\-._~+/]{{{MIN_KEY_CHARS},}}=*")

# The bundled models shipped with the repository: <repo>/model_repository.
DEFAULT_MODEL_REPOSITORY = Path(__file__).resolve().parents[1] / "model_repository"


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

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    # One or more directories of bundles, searched in order (a name used twice is refused).
    model_repository: Annotated[list[Path], NoDecode] = Field(default_factory=lambda: [DEFAULT_MODEL_REPOSITORY],
                                                              min_length=1)
    # Start even when a bundle is invalid or fails to load (it is listed as failed, the other
    # models serve). Without it such a deployment stops at start-up with the reason.
    allow_partial_start: bool = False
    # Serve only these bundle names (None: every bundle in the repository).
    models: Annotated[list[str] | None, NoDecode] = None
    # default_<task>_model, one per task of core.tasks: see `Settings` below

    # Dynamic batching (per model): a batch closes at max_batch_size items, at
    # max_batch_tokens padded tokens, or max_batch_delay_ms after its first item arrived.
    # Delay 0 is continuous batching: an idle engine takes what is queued at once, and items
    # that arrive while a batch runs form the next one. On CPU it beats a delay (`bench knobs`,
    # docs/performance.md); a delay pays off only where one engine call costs much more than
    # the items in it (a GPU).
    max_batch_size: int = Field(32, ge=1)
    max_batch_delay_ms: float = Field(0.0, ge=0)
    max_batch_tokens: int = Field(16384, ge=1)
    # A batch whose items have very different bucket shapes runs as several graph calls, so
    # short items are not padded to the longest (service.inference.runtime.plan_calls). This is what one
    # more call costs, in padded tokens; None: measured per model at warm-up (the "model ready"
    # log gives it); 0: one call per shape; a huge value: one call per batch.
    call_overhead_tokens: float | None = Field(None, ge=0)
    # Items (not requests) waiting per model before new requests get 429.
    max_queue: int = Field(1024, ge=1)
    request_timeout_ms: float = Field(30_000, gt=0)

    # onnxruntime
    intra_op_threads: int | None = Field(None, ge=1)
    # Server processes behind the port (service.process.workers); each loads every model.
    workers: int = Field(1, ge=1, le=64)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # CUDAExecutionProvider options (device cuda, or auto on a GPU; ignored on CPU).
    # TF32 off: onnxruntime's CUDA EP multiplies in TF32 by default, and then an answer depends
    # on the batch it ran in (the figures: docs/configuration.md).
    cuda_use_tf32: bool = False
    # cuDNN convolution algorithm search. onnxruntime's EXHAUSTIVE re-benchmarks on every new
    # shape, and the service's shapes change from call to call (the cost: docs/configuration.md).
    cuda_conv_algo_search: Literal["EXHAUSTIVE", "HEURISTIC", "DEFAULT"] = "DEFAULT"
    cuda_device_id: int = Field(0, ge=0)
    # the device memory arena: how it grows, and its cap in bytes (None: onnxruntime's, no cap)
    cuda_arena_extend_strategy: Literal["kNextPowerOfTwo", "kSameAsRequested"] = "kNextPowerOfTwo"
    cuda_mem_limit: int | None = Field(None, ge=1)
    # Pad each graph call's batch dimension to a grid size (1, 2, 4, ... up to max_batch_size),
    # as lengths are padded to buckets, so a session only sees the shapes its warm-up ran
    # (service.inference.runtime). None: on for CUDA, off on CPU (bench.ab on CPU: see README Performance).
    batch_grid: bool | None = None

    # Request limits
    max_inputs_per_request: int = Field(64, ge=1)
    max_body_bytes: int = Field(1 << 20, ge=1)
    # NFKC can turn one character into 18 (U+FDFA), and the tokenizer's time and memory follow
    # the normalized length: a text longer than this, before or after NFKC, is 422; so is a
    # request whose texts come to more than max_request_chars after NFKC. Checked in bounded
    # chunks before tokenizing (core.tokenization.check_text).
    max_text_chars: int = Field(100_000, ge=1)
    # 256 Ki: 64 inputs of 4,096 characters; the largest accepted request, and several at once,
    # stay bounded in time and memory (docs/reliability.md, `python -m bench.reliability expansion`)
    max_request_chars: int = Field(1 << 18, ge=1)
    # An answer's JSON over this is 422 answer_too_large (explanations describe up to the
    # model's max length of tokens per text and a weight per token pair: 64 inputs of the
    # bundled verification model with five evidence sentences each stay well under it)
    max_answer_bytes: int = Field(8 << 20, ge=1024)

    # HTTP connection limits (service.http.http: uvicorn has no header-read timeout and, with
    # httptools, no header size limit).
    max_header_bytes: int = Field(16_384, ge=1024)
    # request line + headers must arrive within this from the first byte (or from the
    # connection's opening for its first request: a connection that sends nothing is closed)
    header_timeout_s: float = Field(10.0, gt=0)
    # the whole body must arrive within this from the end of the headers (408), and within the
    # request deadline (504)
    body_timeout_s: float = Field(10.0, gt=0)
    keep_alive_timeout_s: float = Field(5.0, gt=0)
    # an answer the client does not read (it backs up in the server) is dropped, and its
    # connection aborted, after this long without progress (nginx's send_timeout)
    write_timeout_s: float = Field(10.0, gt=0)
    # open connections; beyond it the oldest connection waiting for a request is closed to make
    # room, and without one the new connection gets 503 at once. Capped by the process's
    # file-descriptor limit (less a reserve for model files and sockets).
    max_connections: int = Field(4096, ge=1)
    # /docs and /redoc: off unless asked for, as Swagger UI and ReDoc load their scripts from a
    # CDN (blank pages on an air-gapped host, third-party code on our origin). /openapi.json stays.
    docs: bool = False
    # /ui, the explanation page (static files from the package, no CDN, strict CSP)
    ui: bool = True
    # FastAPI's native OpenTelemetry HTTP metrics and error logs to the providers this process
    # configures (FASTAPI_OTEL_AUTO_CONFIGURE and OTEL_* for exporters); never its spans: traces
    # are otlp_endpoint's (one way to trace). Off: the service's metrics are Prometheus', and
    # the hook costs a provider lookup per request.
    opentelemetry: bool = False
    # Traces of the inference endpoints and /tokenize (service.tracing), sent by OTLP/HTTP to
    # this collector URL (http://collector:4318; /v1/traces is added unless it ends so). None:
    # off, at no cost per request (docs/performance.md).
    otlp_endpoint: str | None = None
    otlp_service_name: str = "attserve"
    # share of the traces that start here that are kept; a caller's traceparent decides for its own
    trace_sample_ratio: float = Field(1.0, ge=0, le=1)
    trace_forced_per_s: float = Field(
        10.0, ge=0, description="Requests a second whose caller's `traceparent` is sampled that are traced beyond "
        "the trace sample ratio (a token bucket: no caller makes every request pay for tracing); 0: a caller's "
        "sampled flag is kept only at the ratio (service.tracing).")
    otlp_timeout_s: float = Field(
        2.0, gt=0, description="Seconds an OTLP export may take, retries included, and the most a shutdown "
        "waits to flush the spans still buffered: a dead or hanging collector delays no SIGTERM past it.")
    slow_request_ms: float = Field(
        0.0, ge=0, description="A request to an inference endpoint that takes longer than this (ms, arrival to "
        "answer) is logged at WARNING with its stage times (queue, inference, the rest), status, model, "
        "version, cache and trace id; 0: off.")
    # The response cache (service.http.cache): at most this many bytes of answers, least recently used
    # out first; 0: off. Per process (each worker has its own).
    response_cache_bytes: int = Field(0, ge=0)

    # API keys: with any set, every route but the health checks (and /metrics, unless
    # metrics_require_key) answers 401 without `Authorization: Bearer <one of them>`
    # (service.http.auth). Comma-separated, and/or a file of one key per line (a Docker or Kubernetes
    # secret), read once at start; SecretStr, so neither repr() nor a log shows them.
    api_keys: Annotated[list[SecretStr], NoDecode] = Field(default_factory=list)
    api_keys_file: Path | None = None
    metrics_require_key: bool = False
    # Host names (comma-separated; `*.example.com` for subdomains) a request's Host header must
    # name, on the same routes; None: any. Against DNS rebinding: a web page that points its
    # own name at this server's address still sends its own name.
    allowed_hosts: Annotated[list[str] | None, NoDecode] = None

    # Models changed while serving (service.inference.model_control, docs/model-control.md): none (the
    # models found at start serve until the process ends), explicit (the Open Inference
    # Protocol's repository API loads, unloads and reloads them), poll (the repository folder is
    # watched every repository_poll_s: a new, changed or removed bundle is loaded, reloaded or
    # unloaded by itself).
    model_control_mode: Literal["none", "explicit", "poll"] = "none"
    repository_poll_s: float = Field(5.0, gt=0)
    # Keys of the repository API (POST /v2/repository/...): required when api_keys are set (a
    # key that may classify may not change the models), like them comma-separated or a file.
    control_api_keys: Annotated[list[SecretStr], NoDecode] = Field(default_factory=list)
    control_api_keys_file: Path | None = None
    # A share of the requests that name no version sent to another version of the model, to
    # compare them before switching (metrics per version: attserve_version_requests_total):
    # `name=version:share`, comma-separated (`fever-attconv=2:0.1`); the repository API changes it.
    canary: Annotated[dict[str, tuple[str, float]], NoDecode] = Field(default_factory=dict)

    # how often freed memory is handed back to the OS (glibc malloc_trim; service.http.app); 0: never
    memory_trim_s: float = Field(10.0, ge=0)

    shutdown_timeout_s: float = Field(30.0, ge=0)
    log_level: str = "INFO"
    access_log: bool = False

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
        return _checked_keys(keys, f"ATTSERVE_{info.field_name.upper()}")

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


# Default model per task (ATTSERVE_DEFAULT_<TASK>_MODEL, one per task of core.tasks); None: the
# bundle of that task whose config.json says `"default": true`, else the served model of that
# task with the best recorded test accuracy (ties: name order; the start-up log and /v1/models
# say so).
Settings = create_model(
    "Settings", __base__=_Settings, __module__=__name__,
    **{f"default_{task}_model": (Optional[str], None) for task in TASKS},
)
