"""`python -m service`: the same as `attserve serve`."""

import typer

from service.process.commands import serve

if __name__ == "__main__":
    typer.run(serve)
