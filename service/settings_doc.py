"""docs/configuration.md's settings tables, generated from `Settings.model_fields` (service.settings).

`python -m service.settings_doc` prints them; `--write` puts them between the markers of
docs/configuration.md, leaving the prose around them. tests/unit/test_settings_docs.py fails when
the file and this output differ.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from service.settings import setting_docs

CONFIGURATION_DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
BEGIN = ("<!-- settings:begin. Generated from service/settings.py by `python -m service.settings_doc --write`: "
         "change a setting's description there, not here. -->")
END = "<!-- settings:end -->"


def _cell(text: str) -> str:
    """Markdown of a table cell: `docs/x.md` as a link (the page sits beside them), pipes escaped."""
    return re.sub(r"\bdocs/([\w-]+\.md)", r"[\1](\1)", text).replace("|", "\\|").replace("\n", " ")


def settings_tables() -> str:
    """One table per group of settings, in the order of `setting_docs`."""
    lines: list[str] = []
    group = None
    for doc in setting_docs():
        if doc.group != group:
            group = doc.group
            lines += ["", f"### {group}", "", "| variable | `attserve serve` flag | default | meaning |", "|---|---|---|---|"]
        flag = f"`{doc.flag}`" if doc.flag else f"none, env only: {doc.env_only}"
        lines.append(f"| `{doc.env_var}` | {_cell(flag)} | {_cell(doc.default)} | {_cell(doc.description)} |")
    return "\n".join(lines).lstrip("\n")


def with_tables(page: str) -> str:
    """`page` with the text between its markers replaced by the generated tables."""
    start, end = page.find(BEGIN), page.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the page has no {BEGIN!r} ... {END!r} markers")
    return page[:start + len(BEGIN)] + "\n\n" + settings_tables() + "\n\n" + page[end:]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m service.settings_doc", description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite the tables in {CONFIGURATION_DOC}")
    args = parser.parse_args(argv)
    if not args.write:
        print(settings_tables())
        return
    page = CONFIGURATION_DOC.read_text(encoding="utf-8")
    CONFIGURATION_DOC.write_text(with_tables(page), encoding="utf-8")


if __name__ == "__main__":
    main()
