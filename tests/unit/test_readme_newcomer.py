"""The README's own-data commands run as written after `make install-dev` (attserve
is in .venv/bin, not on PATH), and it states train's --force rule beside export's."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _own_data_section() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Train and serve your own model"):]
    return section[:section.index("\n## ", 3)]


def test_own_data_commands_use_the_venv_that_make_installs():
    section = _own_data_section()
    block = section[section.index("```bash\n") + 8:]
    block = block[:block.index("```")]
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.strip() and not line.startswith(("#", " "))]
    assert commands[0] == "make install-dev"
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "install-dev:" in makefile and "VENV ?= .venv" in makefile
    for command in commands[1:]:
        if "attserve" in command:
            assert ".venv/bin/attserve " in command, command


def test_train_force_rule_is_documented():
    section = _own_data_section()
    assert "`attserve train` does the same for an existing checkpoint directory" in section


def test_the_readme_minimal_recipe_is_the_schema_one():
    """The README's minimal recipe block is training.recipes.MINIMAL_RECIPE character for
    character (whose defaults tests/unit/test_recipes.py checks), so the two cannot drift apart."""
    from training.recipes import MINIMAL_RECIPE

    section = _own_data_section()
    block = section[section.index("```toml\n") + 8:]
    assert block[:block.index("```")] == MINIMAL_RECIPE


def test_the_readme_stays_a_users_page():
    """At most 350 lines: benchmarks, paper reproduction, model training details and
    development live under docs/, and every docs/ page the README links exists."""
    import re

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 350
    links = re.findall(r"\]\(((?:docs|docker|deploy|examples|model_cards)/[^)#]+)\)", readme)
    assert len(links) >= 8
    for link in links:
        assert (ROOT / link).exists(), link
