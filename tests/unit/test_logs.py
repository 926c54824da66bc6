"""Structured logs: every `extra=` field reaches the line, in both formats."""

import json
import logging

from service.logs import JsonFormatter, TextFormatter


def record(**extra) -> logging.LogRecord:
    rec = logging.LogRecord("service.inference.batcher", logging.WARNING, __file__, 1, "batch failed %s", ("now",), None)
    for key, value in extra.items():
        setattr(rec, key, value)
    return rec


def test_json_line_carries_message_and_extra_fields_but_not_uvicorn_colours():
    line = JsonFormatter().format(record(model="snli", batch_size=7, color_message="\x1b[36m"))
    out = json.loads(line)
    assert out["message"] == "batch failed now"
    assert out["level"] == "WARNING" and out["logger"] == "service.inference.batcher"
    assert out["model"] == "snli" and out["batch_size"] == 7
    assert "color_message" not in out and "args" not in out


def test_text_line_appends_key_value_pairs():
    line = TextFormatter().format(record(model="snli", parity=1e-6))
    assert line.endswith('batch failed now model="snli" parity=1e-06')
