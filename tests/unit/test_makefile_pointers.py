"""The Makefile's comments point to pages and README sections that exist (its pointer to the
README's "Paper reproduction" outlived the section's move to docs/, issue 56)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_page_and_readme_section_the_makefile_names_exists():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    headings = {line.lstrip("#").strip() for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
                if line.startswith("#")}
    for section in re.findall(r'README "([^"]+)"', makefile):
        assert section in headings, f"the Makefile names README section {section!r}; the README has no such heading"
    pages = re.findall(r"\b((?:docs|tests|tools|examples)/[\w./-]+\.(?:md|py|sh))", makefile)
    assert pages, "the Makefile names no page: the pattern above no longer matches its comments"
    for page in pages:
        assert (ROOT / page).is_file(), page
