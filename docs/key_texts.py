"""What a key means, how a config writes its type and default, and which keys are blocks of
fields, read from the code (for docs/gen_keys.py): `:param key:` / `:ivar key:` entries of
docstrings, the comment on (or right above) a dataclass field's line, dataclass blocks."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import pkgutil
import re
import sys
import textwrap
import typing
from typing import Any

PACKAGE = "catwalk_steps"

FIELD = re.compile(r":(?:param|ivar)\s+([\w, ]+):")


def docstring_texts(doc: str | None) -> dict[str, str]:
    """`:param key:` / `:ivar key:` entries of a docstring, each joined into one line (an entry
    ends at the next entry or the paragraph's end; `:ivar a, b:` documents both)."""
    texts: dict[str, str] = {}
    for paragraph in re.split(r"\n\s*\n", textwrap.dedent(doc or "")):
        found = list(FIELD.finditer(paragraph))
        if not found:
            continue
        for match, after in zip(found, found[1:] + [None], strict=True):
            end = after.start() if after else len(paragraph)
            text = " ".join(paragraph[match.end() : end].split())
            for name in match.group(1).split(","):
                texts.setdefault(name.strip(), text)
    return texts


def field_comments(cls: type) -> dict[str, str]:
    """The comment on each field's line in a class's source (`seed: int = 42  # ...`)."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    lines = source.splitlines()
    comments: dict[str, str] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            line = lines[node.end_lineno - 1] if node.end_lineno else ""
            above: list[str] = []  # comment lines right above the field
            row = node.lineno - 2
            while row >= 0 and lines[row].strip().startswith("#"):
                above.insert(0, lines[row].strip().lstrip("#").strip())
                row -= 1
            if "#" in line:
                comments[node.target.id] = line.split("#", 1)[1].strip()
            elif above:
                comments[node.target.id] = " ".join(above)
    return comments


def sources_of(target: Any) -> list[Any]:
    """Where a component's keys are documented: itself, its constructor and `run`, its base
    classes, and the dataclasses its module uses (a step's typed settings)."""
    found: list[Any] = [target]
    if inspect.isclass(target):
        for cls in target.__mro__:
            found += [cls, vars(cls).get("__init__"), vars(cls).get("run")]
    module = sys.modules.get(getattr(target, "__module__", ""), None)
    for value in vars(module).values() if module else ():
        ours = isinstance(value, type) and (value.__module__ or "").startswith(PACKAGE)
        if ours and dataclasses.is_dataclass(value):
            found.append(value)
    return [s for s in found if s is not None]


def texts_for(target: Any) -> dict[str, str]:
    """Key -> its text: the first source that documents it wins (docstrings before comments)."""
    texts: dict[str, str] = {}
    sources = sources_of(target)
    for source in sources:
        for name, text in docstring_texts(getattr(source, "__doc__", None)).items():
            texts.setdefault(name, text)
    for source in sources:
        if inspect.isclass(source) and dataclasses.is_dataclass(source):
            for name, text in field_comments(source).items():
                texts.setdefault(name, text)
    return texts


# --- Types and defaults, as a config writes them ----------------------------------------------


def type_text(annotation: Any) -> str:
    if annotation is inspect.Parameter.empty:
        return "any"
    if isinstance(annotation, str):
        text = annotation
    elif isinstance(annotation, type) and not typing.get_args(annotation):
        text = annotation.__name__
    else:
        text = str(annotation)
    text = text.replace("typing.", "").replace("NoneType", "None")
    text = re.sub(r"<class '([\w.]+)'>", r"\1", text)
    text = re.sub(r"\b(?:[a-z_][\w]*\.)+([A-Za-z_]\w*)", r"\1", text)  # module paths
    text = re.sub(r"Optional\[(.*)\]$", r"\1 | None", text)
    text = re.sub(r"Union\[(.*)\]$", lambda m: m.group(1).replace(", ", " | "), text)
    return text


def default_text(default: Any) -> str:
    if default is inspect.Parameter.empty or default is dataclasses.MISSING:
        return "required"
    if default is None:
        return "`null`"
    if isinstance(default, bool):
        return "`true`" if default else "`false`"
    if isinstance(default, str):
        return f"`'{default}'`"
    return f"`{default!r}`"


def is_block(cls: Any) -> bool:
    """A dataclass that a config writes as a block: one of ours (an adapter), or one Tango builds
    from params (FairScale's `FSDPConfig`); not a step's result (`DatasetDict`)."""
    from tango.common import FromParams

    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        return False
    return issubclass(cls, FromParams) or (cls.__module__ or "").startswith(PACKAGE + ".")


def dataclasses_in(annotation: Any) -> list[type]:
    """The block types a key's annotation names directly (or in a union), with their dataclass
    subclasses, and for a Protocol of ours (an adapter's spec) the package's dataclasses that
    implement it: each is a block whose fields are keys too."""
    found: list[type] = []
    for candidate in [annotation, *typing.get_args(annotation)]:
        stack = [candidate] if is_block(candidate) else implementations(candidate)
        while stack:
            cls = stack.pop(0)
            if is_block(cls) and cls not in found:
                found.append(cls)
            stack += sorted(cls.__subclasses__(), key=lambda c: c.__qualname__)
    return found


def implementations(protocol: Any) -> list[type]:
    """Our dataclasses that have every public member of `protocol`, when it is a Protocol of
    this package (each adapter type's spec, behind `AdapterSpec`)."""
    ours = isinstance(protocol, type) and (protocol.__module__ or "").startswith(PACKAGE + ".")
    if not (ours and getattr(protocol, "_is_protocol", False)):
        return []
    members = [n for n in {*vars(protocol), *getattr(protocol, "__annotations__", {})}]
    members = [n for n in members if not n.startswith("_")]
    return [
        cls
        for cls in package_dataclasses()
        if cls is not protocol and all(hasattr(cls, n) for n in members)
    ]


def package_dataclasses() -> list[type]:
    """Every dataclass the package defines (every module imported), in a stable order."""
    import catwalk_steps

    for module in pkgutil.walk_packages(catwalk_steps.__path__, PACKAGE + "."):
        importlib.import_module(module.name)
    found = {
        value
        for name, module in list(sys.modules.items())
        if name.startswith(PACKAGE + ".")
        for value in vars(module).values()
        if isinstance(value, type) and dataclasses.is_dataclass(value) and value.__module__ == name
    }
    return sorted(found, key=lambda c: (c.__module__, c.__qualname__))
