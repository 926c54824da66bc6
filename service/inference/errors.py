"""Every expected failure of the service as an exception with its HTTP status and a stable
machine-readable `code`, and the helpers their messages share (`set_by`, `excerpt`). Free of
FastAPI and Starlette, so the inference layer, `attserve score` and the HTTP layer raise the same
errors; service.http.errors renders them as the one JSON error body (docs/errors.md).
"""

from __future__ import annotations

from service.settings import Settings, env_var


class ServiceError(Exception):
    """An expected failure with its HTTP status, a stable machine-readable code and headers."""

    status = 500
    code = "internal_error"

    def __init__(self, message: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.headers = headers or {}


class InvalidInput(ServiceError):
    status, code = 422, "invalid_input"


class TooManyInputs(ServiceError):
    status, code = 422, "too_many_inputs"


class TooManyEvidence(ServiceError):
    status, code = 422, "too_many_evidence"


class UnknownModel(ServiceError):
    status, code = 422, "unknown_model"


class WrongTask(ServiceError):
    status, code = 422, "wrong_task"


class BodyTooLarge(ServiceError):
    status, code = 413, "body_too_large"


class AnswerTooLarge(ServiceError):
    status, code = 422, "answer_too_large"


class QueueFull(ServiceError):
    status, code = 429, "queue_full"


class DeadlineExceeded(ServiceError):
    status, code = 504, "deadline_exceeded"


class NoModelForTask(ServiceError):
    # not 503: no model of the task is configured (or every one failed), so retrying is useless
    status, code = 404, "no_model_for_task"


class NotReady(ServiceError):
    status, code = 503, "not_ready"


class ShuttingDown(ServiceError):
    status, code = 503, "shutting_down"


class ClientClosed(ServiceError):
    # nginx's code for "client closed the request"; nobody reads it, the metrics do.
    status, code = 499, "client_closed_request"


class InferenceFailed(ServiceError):
    status, code = 500, "inference_failed"


class UnsupportedMediaType(ServiceError):
    status, code = 415, "unsupported_media_type"



class ModelNotFound(ServiceError):
    # the Open Inference Protocol's unknown model or version (service.http.oip) and the model
    # control's model that is not in the repository or not loaded
    status, code = 404, "model_not_found"


class BadRequest(ServiceError):
    # the Open Inference Protocol and its repository API answer a request they refuse 400
    status, code = 400, "invalid_request"


class LoadFailed(ServiceError):
    # Triton answers a failed load 400
    status, code = 400, "load_failed"


class WouldRemoveDefault(ServiceError):
    # the request is well formed but would take a task's default away: said, not done
    status, code = 409, "would_remove_default"


class ChangeNotApplied(ServiceError):
    # the change is in the workers' log, but not every live worker applied it in time
    status, code = 504, "change_not_applied"


class Unauthorized(ServiceError):
    status, code = 401, "unauthorized"


class NotInThisMode(ServiceError):
    status, code = 400, "model_control_mode"


def setting_env(field: str) -> str:
    """The environment variable of a Settings field: max_body_bytes -> ATTSERVE_MAX_BODY_BYTES."""
    if field not in Settings.model_fields:
        raise KeyError(f"no setting {field!r}")
    return env_var(field)


def set_by(field: str) -> str:
    """The clause every limit error ends its sentence with, naming the setting that raises the
    limit: "(limit set by ATTSERVE_MAX_BODY_BYTES)". One place, so no limit error forgets it."""
    return f"(limit set by {setting_env(field)})"


EXCERPT_CHARS = 40


def excerpt(value: str, limit: int = EXCERPT_CHARS) -> str:
    """A short, escaped quote of user input for an error message: repr() of at most `limit`
    characters (control and invisible characters come out as escapes), and the full length
    when cut."""
    if len(value) <= limit:
        return ascii(value)
    return f"{ascii(value[:limit])}... ({len(value)} characters)"


def unquoted_excerpt(value: str) -> str:
    """`excerpt` without the quotes, for a name or a path inside a message: escaped to printable
    ASCII and cut to EXCERPT_CHARS (a client's field name or path can be a megabyte long)."""
    shown = ascii(value)[1:-1]
    return shown if len(shown) <= EXCERPT_CHARS else f"{shown[:EXCERPT_CHARS]}... ({len(value)} characters)"
