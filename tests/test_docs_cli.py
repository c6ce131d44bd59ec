"""The command-line page (docs/reference/cli.md) is the commands': it is what docs/gen_cli.py
writes from their argparse definitions (a stale page fails naming the command), it documents
every console script pyproject.toml declares, and each script's `--help`, run as a user runs
it, prints what the page shows."""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from pathlib import Path

import pytest

from . import commands
from .conftest import REPO, TANGO_ENV

PAGE = REPO / "docs" / "reference" / "cli.md"


def load_generator():
    """docs/gen_cli.py, imported as `python docs/gen_cli.py` runs it."""
    spec = importlib.util.spec_from_file_location("gen_cli", REPO / "docs" / "gen_cli.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_cli"] = module
    spec.loader.exec_module(module)
    return module


gen_cli = load_generator()


def page_help(prog: str) -> str:
    """The `--help` text the page shows for `prog` (its collapsed block, unindented)."""
    text = gen_cli.sections(PAGE.read_text())[prog]
    block = re.search(r'^\?\?\? example "`[\w-]+ --help`"\n\n    ```text\n(.*?)\n    ```$', text,
                      re.M | re.S)  # fmt: skip
    assert block, f"{PAGE.name}: {prog} has no --help block"
    return "\n".join(line[4:] for line in block.group(1).splitlines()) + "\n"


def test_the_committed_page_is_what_the_generator_writes():
    differing = gen_cli.stale(PAGE.read_text(), gen_cli.render())
    assert not differing, f"{PAGE.name} is stale for {differing}: run `make cli`"


def test_a_changed_option_makes_its_command_stale():
    page = gen_cli.render()
    changed = page.replace("documents whose score changed to list", "documents listed")
    assert gen_cli.stale(page, changed) == ["catwalk-compare"]


def test_the_page_documents_every_declared_console_script():
    documented = set(gen_cli.sections(PAGE.read_text())) - {""}
    assert documented == set(commands.declared_scripts())


def test_an_option_whose_help_names_no_default_is_refused():
    parser = argparse.ArgumentParser(prog="catwalk-x")
    parser.add_argument("--size", type=int, default=3, help="how big")
    with pytest.raises(ValueError, match=r"catwalk-x --size: its help names no \(default"):
        gen_cli.section(parser)


@pytest.mark.slow  # a process per command (forked from the command server)
@pytest.mark.parametrize("script", sorted(commands.declared_scripts()))
def test_help_of_each_console_script_is_the_page_s(script):
    argv = [str(Path(sys.executable).with_name(script)), "--help"]
    done = commands.run(argv, env={**TANGO_ENV, "COLUMNS": str(gen_cli.COLUMNS)})
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == page_help(script)
