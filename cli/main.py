"""`attserve` CLI: one command per step of the pipeline.

Each command lives beside the code it drives (`training/data_command.py`, `training/commands.py`, `export/commands.py`,
`service/process/commands.py`, `bench/commands.py`; the `attserve bundle ...` group in `export/rewrite/commands.py`)
and those modules import nothing heavy at import time, so `attserve serve` never loads torch and
`--help` is instant.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import logging
import os
import shlex
import sys
from typing import Callable

import typer

app = typer.Typer(
    name="attserve",
    help="Train, export and serve attentive-convolution text classifiers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# module -> the functions in it that become commands (command name = function name, _ -> -)
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "training.data_command": ("data",),
    "training.commands": ("train", "evaluate", "baseline", "card", "fever_report", "recipe_options"),
    "export.commands": ("export",),
    "service.process.commands": ("serve",),
    "bench.commands": ("bench",),
    "cli.score": ("score",),  # bulk scoring of files (scoring.files), no server
    "training.reproduce": ("reproduce",),
}

# group -> (module, the functions in it that become its sub-commands): `attserve GROUP COMMAND`
COMMAND_GROUPS: dict[str, tuple[str, tuple[str, ...]]] = {
    "bundle": ("export.rewrite.commands", ("extend_vocab", "fp16_embeddings", "to_checkpoint", "explanations",
                                           "import_hf")),
}

# Commands that run PyTorch (or the other packages of the `train` extra). The serving install
# (`make serve`, the images) lacks them: these commands say so in one line instead of a traceback.
# A group's entry covers each of its sub-commands.
TRAINING_MODULES = ("torch", "safetensors", "onnx", "sklearn")
TRAINING_COMMANDS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("train", "evaluate", "baseline", "card", "export", "reproduce", "bench", "bundle"),
                    TRAINING_MODULES),
    "recipe-options": ("torch",),  # reads the architectures' network config classes
    "data": ("pyarrow",),  # reads the GloVe package's parquet word list
    "bundle import-hf": (),  # onnxruntime and tokenizers only; its parity check runs where torch is
}
TRAINING_MARK = "(needs training extra)"

PIPED_COLUMNS = 200

# Our own loggers at INFO; libraries (the int8 quantizer logs every tensor) at WARNING.
PROJECT_LOGGERS = ("cli", "models", "training", "export", "service", "bench")


@app.callback()
def main(
    log_level: str = typer.Option("INFO", "--log-level", help="Level of attserve's own log lines."),
    log_format: str = typer.Option("text", "--log-format", help="text (key=value) or json (one object per line)."),
) -> None:
    from service.logs import configure_logging

    if "COLUMNS" not in os.environ and not sys.stdout.isatty():
        # piped or redirected: rich would wrap tables and lines at 80 columns
        os.environ["COLUMNS"] = str(PIPED_COLUMNS)
    configure_logging("WARNING", log_format)
    for name in PROJECT_LOGGERS:
        logging.getLogger(name).setLevel(log_level.upper())


# Help in click's plain style: typer (0.29) prints type tags (`<str>`, `<bool>` on every flag)
# and `{name}` for required arguments in the usage line. Only the help's wording changes here,
# and only where typer has the methods this expects.
_PLAIN_TYPES = {"str": "TEXT", "int": "INTEGER", "float": "FLOAT", "bool": "BOOLEAN"}


def _plain_help() -> None:
    try:
        from typer.core import TyperArgument, TyperOption, _TyperParameter
    except ImportError:  # pragma: no cover - another typer: keep its help as it is
        return
    if not all(hasattr(c, m) for c, m in ((_TyperParameter, "display_type"), (TyperOption, "display_type_rich"),
                                          (TyperArgument, "_usage_display_name"))):
        return  # pragma: no cover
    tagged = _TyperParameter.display_type
    option_rich = TyperOption.display_type_rich

    def display_type(self, ctx):
        label = tagged(self, ctx)
        if isinstance(label, str) and label.startswith("<") and label.endswith(">"):
            label = label[1:-1]
            return _PLAIN_TYPES.get(label, label.upper())
        return label

    def display_type_rich(self, ctx):
        return None if getattr(self, "is_flag", False) and self.metavar is None else option_rich(self, ctx)

    def usage_display_name(self):
        name = (self.metavar or self.name or "").upper()
        name = name if self.required else f"[{name}]"
        return name + ("..." if self.nargs != 1 else "")

    _TyperParameter.display_type = display_type
    TyperOption.display_type_rich = display_type_rich
    TyperArgument._usage_display_name = usage_display_name


_plain_help()


def missing_training_modules(modules: tuple[str, ...] = TRAINING_MODULES) -> list[str]:
    """The packages of the `train` extra (of `modules`) that cannot be imported here."""
    missing = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a parent package missing, or sys.modules[name] = None
            found = False
        if not found:
            missing.append(name)
    return missing


def needs_training_extra(command: str, fn: Callable) -> Callable:
    """`fn`, refusing to run (one line on stderr, exit 2) without the training extra. `command`:
    as typed after `attserve` ("export", "bundle extend-vocab"; a group's entry covers it)."""

    @functools.wraps(fn)
    def guarded(*args, **kwargs):
        missing = missing_training_modules(TRAINING_COMMANDS.get(command.split()[0], TRAINING_MODULES))
        if missing:
            typer.echo(
                # the running interpreter's pip: a bare `pip` may be the system's, not the venv's
                f"attserve {command} needs the training extra: {shlex.quote(sys.executable)} -m pip install -e '.[train]' "
                f"(or make install-dev); not importable here: {', '.join(missing)}",
                err=True,
            )
            raise typer.Exit(2)
        return fn(*args, **kwargs)

    return guarded


def _short_help(fn: Callable) -> str:
    first = (fn.__doc__ or "").strip().split("\n\n")[0]
    return f"{TRAINING_MARK} " + " ".join(first.split())


def _import_commands(module_name: str):
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:  # a module not written yet, or an extra not installed
        if exc.name != module_name:
            raise
        return None


def _add_commands(target: typer.Typer, module, names: tuple[str, ...], group: str = "") -> None:
    """The functions `names` of `module` as commands of `target` (the app, or `group`'s sub-app)."""
    for name in names:
        fn = getattr(module, name, None)
        if fn is None:
            continue
        command = name.replace("_", "-")
        typed = f"{group} {command}" if group else command  # as typed after `attserve`
        if TRAINING_COMMANDS.get(typed, TRAINING_COMMANDS.get(typed.split()[0])):
            target.command(command, short_help=_short_help(fn))(needs_training_extra(typed, fn))
        else:
            target.command(command)(fn)


for module_name, names in COMMAND_MODULES.items():
    module = _import_commands(module_name)
    if module is not None:
        _add_commands(app, module, names)

for group, (module_name, names) in COMMAND_GROUPS.items():
    module = _import_commands(module_name)
    if module is None:
        continue
    help_text = (module.__doc__ or "").strip().split("\n\n")[0]
    sub_app = typer.Typer(help=help_text, no_args_is_help=True, add_completion=False,
                          pretty_exceptions_enable=False)
    _add_commands(sub_app, module, names, group=group)
    mark = f"{TRAINING_MARK} " if group in TRAINING_COMMANDS else ""
    app.add_typer(sub_app, name=group, short_help=mark + " ".join(help_text.split()))


if __name__ == "__main__":
    app()
