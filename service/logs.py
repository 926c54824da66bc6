"""Structured logging for every process of the project: one line per record with every
`extra=` field. `json` for the service (machine-read), `text` (message + key=value) for the CLI."""

from __future__ import annotations

import json
import logging

# uvicorn adds `color_message` (the message with ANSI colours): noise in a log line.
_RECORD_FIELDS = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName", "color_message"}


def _extra(record: logging.LogRecord) -> dict:
    return {k: v for k, v in vars(record).items() if k not in _RECORD_FIELDS}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and every `extra=` field."""

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        out.update(_extra(record))
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class TextFormatter(logging.Formatter):
    """`time level logger: message key=value ...` for people at a terminal."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = " ".join(f"{k}={json.dumps(v, default=str)}" for k, v in _extra(record).items())
        return f"{line} {fields}" if fields else line


def configure_logging(level: str | int = "INFO", fmt: str = "json") -> None:
    """Replace the root handlers with one stderr handler in `fmt` ("json" or "text")."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
