"""The documentation site says what the code is: every one-line error type is on the
troubleshooting page, every sub-package on the architecture map, whose layers the imports
follow, every path a page names exists, and the README stays a short front door whose links
lead to pages that exist."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from pathlib import Path

from tango.common.exceptions import ConfigurationError

import catwalk_steps
from catwalk_steps import errors

from .conftest import REPO

DOCS = REPO / "docs"
PATH = re.compile(r"`((?:catwalk_steps|catwalk_startup|tests|bench|experiments)/[\w./*-]+)`")


def every_module() -> None:
    for module in pkgutil.walk_packages(catwalk_steps.__path__, "catwalk_steps."):
        importlib.import_module(module.name)


def subclasses(cls: type) -> list[type]:
    found = []
    for sub in cls.__subclasses__():
        found += [sub, *subclasses(sub)]
    return found


def one_line_error_types() -> set[str]:
    """What `tango run` shows as one line: the registered types (`one_line_error`), the
    configuration errors of ours, and our KeyboardInterrupts (Tango prints those as one line)."""
    every_module()
    ours = {
        sub
        for base in (ConfigurationError, KeyboardInterrupt)
        for sub in subclasses(base)
        if sub.__module__.startswith(("catwalk_steps", "catwalk_startup"))
    }
    return {cls.__name__ for cls in {*errors._ONE_LINE, *ours}}


def test_every_one_line_error_type_is_on_the_troubleshooting_page():
    page = (DOCS / "troubleshooting.md").read_text()
    table = page[page.index("## Every one-line error") : page.index("## The checks behind them")]
    rows = set(re.findall(r"^\| `(\w+)` \|", table, re.M))
    missing = one_line_error_types() - rows
    assert not missing, f"docs/troubleshooting.md: add a row for {sorted(missing)}"


def test_the_architecture_map_names_every_sub_package():
    page = (DOCS / "architecture.md").read_text()
    packages = [p.name for p in pkgutil.iter_modules(catwalk_steps.__path__) if p.ispkg]
    missing = [p for p in packages if f"catwalk_steps/{p}/" not in page]
    assert not missing, f"docs/architecture.md: the map lacks {missing}"


def layer_table() -> dict[str, int]:
    """docs/architecture.md's layers: each sub-package or top-level module named, its layer."""
    page = (DOCS / "architecture.md").read_text()
    rows = re.findall(r"^\| (\d+) \| (.*?) \|", page, re.M)
    names = r"`(?:catwalk_steps/)?(\w+)/?`"
    return {name: int(layer) for layer, cell in rows for name in re.findall(names, cell)}


def imported_rooms(path: Path) -> set[str]:
    """The sub-packages and top-level modules of catwalk_steps that a file imports."""
    package = path.relative_to(REPO).parent.parts
    rooms = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name.split(".") for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = list(package[: len(package) - node.level + 1]) if node.level else []
            module = [*base, *node.module.split(".")] if node.module else base
            targets = [module] if len(module) > 1 else [[*module, a.name] for a in node.names]
        else:
            continue
        rooms |= {t[1] for t in targets if t[0] == "catwalk_steps" and len(t) > 1}
    return rooms


def test_every_import_runs_down_the_layer_table():
    """A sub-package imports only those of a lower layer (layer 0's modules each other too), and
    every one has its row: a room that moves down, or imports upward, fails here."""
    layers, wrong, missing = layer_table(), [], set()
    for path in sorted((REPO / "catwalk_steps").rglob("*.py")):
        parts = path.relative_to(REPO / "catwalk_steps").parts
        room = parts[0] if len(parts) > 1 else path.stem
        for other in imported_rooms(path) - {room} if room != "__init__" else ():
            missing |= {r for r in (room, other) if r not in layers}
            if {room, other} <= layers.keys() and layers[other] >= layers[room] > 0:
                wrong.append(f"{path.relative_to(REPO)} ({layers[room]}) imports {other}")
    assert not missing, f"docs/architecture.md: the layer table lacks {sorted(missing)}"
    assert not wrong, f"docs/architecture.md: imports against the layers: {wrong}"


def test_every_path_a_page_names_exists():
    """A guide that names a file to touch names one that is there (a moved module fails here)."""
    stale = []
    for page in sorted(DOCS.rglob("*.md")):
        for path in PATH.findall(page.read_text()):
            if not list(REPO.glob(path.rstrip("/"))):
                stale.append(f"{page.relative_to(REPO)}: {path}")
    assert not stale, stale


def test_the_readme_is_short_and_its_links_lead_to_pages():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    links = re.findall(r"\]\((docs/[^)#]+)(?:#[^)]*)?\)", readme)
    assert links, "the README links to the docs pages"
    missing = [link for link in links if not (REPO / link).exists()]
    assert not missing, missing


def test_the_readme_shows_the_demo_experiment_as_it_is():
    readme = (REPO / "README.md").read_text()
    shown = re.search(r"```jsonnet\n(.*?)```", readme, re.S)
    assert shown is not None
    assert shown.group(1) == (REPO / "experiments" / "demo_fsdp.jsonnet").read_text()


def test_the_api_steps_page_shows_every_registered_step():
    from tango import Step

    every_module()
    page = (DOCS / "reference" / "api" / "steps.md").read_text()
    shown = set(re.findall(r"^::: ([\w.]+)$", page, re.M))
    ours = {
        f"{target.__module__}.{target.__qualname__}"
        for name, (target, _) in Step._registry[Step].items()
        if name.startswith("catwalk::")
    }
    assert not ours - shown, f"docs/reference/api/steps.md: add {sorted(ours - shown)}"
