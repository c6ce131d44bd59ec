"""The user pages say what is true now: no test files named (the developer pages, tests.md,
architecture.md, walls.md and the guides, may), and no changelog notes ("Evaluate's VERSION went
to 003", "Before, FSDP2 ..."): what changed is in CHANGELOG.md."""

from __future__ import annotations

import re
from pathlib import Path

from .conftest import REPO

DOCS = REPO / "docs"
DEVELOPER_PAGES = ("reference/tests.md", "architecture.md", "walls.md", "guides/")
# What a user page must not say, and why (each found on a user page before it moved out).
PATTERNS = {
    "a test file": re.compile(r"\btests/[\w./*-]+"),
    "a VERSION bump": re.compile(r"\bVERSION went\b"),
    "what was so before": re.compile(r"\([Bb]efore,|(?:^|\.\s+)Before(?: this version)?,"),
    "a version's history": re.compile(r"\b(?:[Bb]efore this version|since version|used to be)\b"),
    "what no longer is": re.compile(r"\bno longer\b"),
}


def user_pages(docs: Path = DOCS) -> list[Path]:
    """Every page under docs/ but the developer pages."""
    return [
        page
        for page in sorted(docs.rglob("*.md"))
        if not page.relative_to(docs).as_posix().startswith(DEVELOPER_PAGES)
    ]


def findings(docs: Path = DOCS) -> list[str]:
    """`page:line: what (the text)` for each pattern found on a user page."""
    found = []
    for page in user_pages(docs):
        for number, line in enumerate(page.read_text().splitlines(), start=1):
            for what, pattern in PATTERNS.items():
                match = pattern.search(line)
                if match:
                    where = page.relative_to(docs.parent).as_posix()
                    found.append(f"{where}:{number}: {what} ({match.group(0).strip()!r})")
    return found


def test_user_pages_name_no_test_file_and_hold_no_changelog_notes():
    assert findings() == [], "move changelog notes into CHANGELOG.md; say what is true now"


def test_the_check_finds_each_kind_of_note_and_spares_the_developer_pages(tmp_path):
    docs = tmp_path / "docs"
    (docs / "guides").mkdir(parents=True)
    (docs / "guides" / "engine.md").write_text("See `tests/test_engines.py`.\n")
    (docs / "page.md").write_text(
        "Checked by `tests/test_x.py`.\n"
        "Evaluate's VERSION went to 003 with this.\n"
        "It fails in one line. (Before, FSDP2 cached NaN scores.)\n"
        "Before this version, it took 23.9 s.\n"
        "It is no longer resharded.\n"
        "Read as before, and said once; before, after and between runs.\n"
    )
    assert findings(docs) == [
        "docs/page.md:1: a test file ('tests/test_x.py')",
        "docs/page.md:2: a VERSION bump ('VERSION went')",
        "docs/page.md:3: what was so before ('(Before,')",
        "docs/page.md:4: what was so before ('Before this version,')",
        "docs/page.md:4: a version's history ('Before this version')",
        "docs/page.md:5: what no longer is ('no longer')",
    ]
