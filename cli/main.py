"""`attserve` CLI: one command per step of the pipeline.

Each command lives beside the code it drives (`training/data_command.py`, `training/commands.py`, `export/commands.py`,
`service/commands.py`, `bench/commands.py`) and those modules import nothing heavy at
import time, so `attserve serve` never loads torch and `--help` is instant.
"""

from __future__ import annotations

import importlib
import logging

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
    "training.commands": ("train", "evaluate", "baseline", "card"),
    "export.commands": ("export",),
    "service.commands": ("serve",),
    "bench.commands": ("bench",),
    "training.reproduce": ("reproduce",),
}

# Our own loggers at INFO; libraries (the int8 quantizer logs every tensor) at WARNING.
PROJECT_LOGGERS = ("cli", "models", "training", "export", "service", "bench")


@app.callback()
def main(
    log_level: str = typer.Option("INFO", "--log-level", help="Level of attserve's own log lines."),
    log_format: str = typer.Option("text", "--log-format", help="text (key=value) or json (one object per line)."),
) -> None:
    from service.logs import configure_logging

    configure_logging("WARNING", log_format)
    for name in PROJECT_LOGGERS:
        logging.getLogger(name).setLevel(log_level.upper())


for module_name, names in COMMAND_MODULES.items():
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:  # a module not written yet, or an extra not installed
        if exc.name != module_name:
            raise
        continue
    for name in names:
        fn = getattr(module, name, None)
        if fn is not None:
            app.command(name.replace("_", "-"))(fn)


if __name__ == "__main__":
    app()
