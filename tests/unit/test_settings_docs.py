"""Each setting is declared once (service/settings.py, issue 62): docs/configuration.md's tables and
the `attserve serve` flags are generated from `Settings.model_fields`, and a flag reaches Settings
as its environment variable does."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from cli.main import app
from service.settings import Settings, setting_docs
from service.settings_doc import CONFIGURATION_DOC, with_tables

ROOT = Path(__file__).resolve().parents[2]
WIDE = {"COLUMNS": "250", "TERMINAL_WIDTH": "250"}  # rich wraps help at the terminal's width


def _plain(markdown: str) -> str:
    return markdown.replace("**", "").replace("`", "")


def test_configuration_doc_holds_the_generated_tables():
    page = CONFIGURATION_DOC.read_text(encoding="utf-8")
    assert with_tables(page) == page, "docs/configuration.md is stale: run `python -m service.settings_doc --write`"
    for doc in setting_docs():  # every field, the ones added later too
        assert f"| `{doc.env_var}` |" in page


def test_every_setting_has_a_description_and_a_group():
    for name, field in Settings.model_fields.items():
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        assert (field.description or "").strip(), f"{name}: Field(description=...) is empty"
        assert extra.get("group"), f"{name}: json_schema_extra has no group (SERVER, MODELS, ... in service/settings.py)"


def _serve_options() -> dict[str, list[str]]:
    command = typer.main.get_command(app).commands["serve"]
    return {param.name: [*param.opts, *param.secondary_opts] for param in command.params if param.name != "help"}


def test_every_setting_has_a_serve_flag_or_a_reason_to_be_env_only():
    options = _serve_options()
    docs = setting_docs()
    assert set(options) == {doc.name for doc in docs if doc.flag}, "a flag with no setting, or a setting with no flag"
    for doc in docs:
        if doc.flag is None:
            assert doc.env_only and doc.env_only.strip(), f"{doc.name}: env only without a reason"
        else:
            assert doc.flag in options[doc.name]
    # the secrets stay off the command line (visible in `ps`); their files have flags
    assert {doc.name for doc in docs if doc.flag is None} == {"api_keys", "control_api_keys"}
    assert "--api-keys-file" in options["api_keys_file"]
    assert options["docs"] == ["--docs", "--no-docs"]


def test_serve_help_shows_every_flag_with_its_variable_default_and_group():
    result = CliRunner().invoke(app, ["serve", "--help"], env=WIDE)
    assert result.exit_code == 0, result.output
    text = " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.output).split())  # the panels' text, unwrapped
    for doc in setting_docs():
        if doc.flag is None:
            assert f"[env var: {doc.env_var}]" not in text
            continue
        assert f"{doc.flag} " in text and f"[env var: {doc.env_var}] [default: {_plain(doc.default)}]" in text
        assert " ".join(_plain(doc.description).split()[:6]) in text
    for group in {doc.group for doc in setting_docs()}:
        assert f" {group} " in text


@pytest.fixture
def started(monkeypatch):
    """Runs `attserve serve ARGS` up to the server's start and returns the Settings it built."""
    import service.logs
    import service.process.commands as commands
    import service.process.server as server

    for name in [name for name in os.environ if name.startswith("ATTSERVE_")]:
        monkeypatch.delenv(name)
    built: list = []
    monkeypatch.setattr(server, "build_server", lambda settings: built.append(settings) or "server")
    monkeypatch.setattr(server, "run_server", lambda built_server: 0)
    monkeypatch.setattr(commands, "port_in_use", lambda host, port: None)
    monkeypatch.setattr(service.logs, "configure_logging", lambda *args, **kwargs: None)

    def start(args: list[str], env: dict[str, str] | None = None):
        for name, value in (env or {}).items():
            monkeypatch.setenv(name, value)
        result = CliRunner().invoke(app, ["serve", *args])
        return result, (built.pop() if built else None)

    return start


@pytest.mark.parametrize("args, env, expected", [
    (["--max-batch-size", "7"], {}, {"max_batch_size": 7}),
    ([], {"ATTSERVE_MAX_BATCH_SIZE": "9"}, {"max_batch_size": 9}),
    (["--max-batch-size", "7"], {"ATTSERVE_MAX_BATCH_SIZE": "9"}, {"max_batch_size": 7}),
    # a boolean flag not given leaves the environment; --no-X and --X set it either way
    ([], {"ATTSERVE_UI": "false"}, {"ui": False, "docs": False, "batch_grid": None}),
    (["--no-ui", "--docs", "--batch-grid"], {"ATTSERVE_UI": "true"}, {"ui": False, "docs": True, "batch_grid": True}),
    (["--device", "cpu", "--trace-sample-ratio", "0.25", "--otlp-service-name", "edge"], {},
     {"device": "cpu", "trace_sample_ratio": 0.25, "otlp_service_name": "edge"}),
    # text the validators split, as they split the variables
    (["--models", "topic, nli", "--canary", "nli=2:0.1", "--allowed-hosts", "a.example,b.example"], {},
     {"models": ["topic", "nli"], "canary": {"nli": ("2", 0.1)}, "allowed_hosts": ["a.example", "b.example"]}),
    (["--default-entailment-model", "nli", "--log-level", "debug"], {},
     {"default_entailment_model": "nli", "log_level": "DEBUG"}),
])
def test_a_flag_reaches_settings_and_overrides_the_environment(started, args, env, expected):
    result, settings = started(args, env)
    assert result.exit_code == 0, result.output
    assert {name: getattr(settings, name) for name in expected} == expected


def test_repositories_and_key_files_from_flags(started, tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("k" * 20 + "\n", encoding="utf-8")
    result, settings = started(["--model-repository", f"{tmp_path}/a,{tmp_path}/b", "--api-keys-file", str(keys)])
    assert result.exit_code == 0, result.output
    assert settings.model_repository == [tmp_path / "a", tmp_path / "b"]
    assert [key.get_secret_value() for key in settings.api_keys] == ["k" * 20]


@pytest.mark.parametrize("args, named", [
    (["--max-batch-size", "0"], "max_batch_size"),  # Settings' own bound (ge=1)
    (["--device", "tpu"], "--device"),  # a Literal's choices, checked by the flag's parser
    (["--canary", "nli=2"], "canary"),
])
def test_an_invalid_flag_exits_2_naming_the_setting(started, args, named):
    result, settings = started(args)
    assert result.exit_code == 2 and settings is None
    assert named in result.output


def test_python_m_service_takes_the_same_flags():
    done = subprocess.run([sys.executable, "-m", "service", "--help"], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **WIDE}, timeout=120)
    assert done.returncode == 0, done.stderr
    for doc in setting_docs():
        if doc.flag:
            assert f"{doc.flag} " in done.stdout
