"""The configuration-keys page (docs/reference/keys.md) is the code's: every key the code
accepts is on it, every key on it is accepted, and a key added without regenerating the page
(`make keys`) fails here."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import re
import sys
import typing

import pytest
from tango import Step
from tango.common.from_params import infer_constructor_params, infer_method_params
from tango.common.registrable import Registrable

import catwalk_steps  # noqa: F401  (registers the components)

from .conftest import REPO

PAGE = REPO / "docs" / "reference" / "keys.md"


def load_generator():
    """docs/gen_keys.py, imported as `python docs/gen_keys.py` runs it (docs/ on the path)."""
    if str(REPO / "docs") not in sys.path:
        sys.path.insert(0, str(REPO / "docs"))
    spec = importlib.util.spec_from_file_location("gen_keys", REPO / "docs" / "gen_keys.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_keys"] = module
    spec.loader.exec_module(module)
    return module


gen_keys = load_generator()


def page_keys(text: str) -> dict[tuple[str, str], set[str]]:
    """(section, component's first name) -> the keys its table lists, as the page shows them
    (`catwalk::report` is a step and a format)."""
    keys: dict[tuple[str, str], set[str]] = {}
    current = None
    section = ""
    for line in text.splitlines():
        heading = re.match(r"^### `(.+)`$", line)
        if heading:
            current = (section, heading.group(1))
            keys[current] = set()
        elif line.startswith("## "):
            section, current = line[3:], None
        row = re.match(r"^\| `([\w.]+)` \|", line)
        if row and current is not None:
            keys[current].add(row.group(1))
    return keys


def accepted() -> dict[tuple[str, str], dict[str, inspect.Parameter]]:
    """What Tango accepts for each of our registered components, asked of Tango directly:
    (section, first name) -> parameters, less what the code supplies."""
    found: dict[tuple[str, str], dict[str, inspect.Parameter]] = {}
    for base, names in Registrable._registry.items():
        by_target: dict[object, list[str]] = {}
        for name, (target, _) in names.items():
            if name.startswith("catwalk::") or target.__module__.startswith("catwalk_steps."):
                by_target.setdefault(target, []).append(name)
        for target, all_names in by_target.items():
            if inspect.isclass(target) and issubclass(target, Step):
                params = infer_method_params(target, target.run)
            elif inspect.isclass(target):
                params = infer_constructor_params(target)
            else:
                params = dict(inspect.signature(target).parameters)
            supplied = gen_keys.supplied().get(base.__name__, set()) | {"self"}
            params = {
                n: p
                for n, p in params.items()
                if n not in supplied and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
            }
            first = sorted(all_names, key=lambda n: (not n.startswith("catwalk::"), n))[0]
            found[(gen_keys.TITLES.get(base.__name__, base.__name__), first)] = params
    return found


def test_the_committed_page_is_what_the_code_gives():
    """Fails when a key (a step's, an engine's, a settings block's) was added, removed or
    re-documented without `make keys`."""
    fresh = gen_keys.render()
    committed = PAGE.read_text()
    if committed != fresh:
        gone = sorted(set(committed.splitlines()) - set(fresh.splitlines()))[:5]
        new = sorted(set(fresh.splitlines()) - set(committed.splitlines()))[:5]
        pytest.fail(
            "docs/reference/keys.md is stale: run `make keys` (python docs/gen_keys.py).\n"
            f"on the page, no longer in the code: {gone}\nin the code, not on the page: {new}"
        )


def test_every_key_the_code_accepts_is_on_the_page():
    listed = page_keys(PAGE.read_text())
    for name, params in accepted().items():
        assert name in listed, f"{name}: not on the page"
        missing = set(params) - listed[name]
        assert not missing, f"{name}: {sorted(missing)} accepted but not on the page"
    common = {n for n in inspect.signature(Step.__init__).parameters if n.startswith("step_")}
    text = PAGE.read_text()
    every_step = text[text.index("## Every step also takes") :]
    assert all(f"| `{n}` |" in every_step for n in common)


def test_every_key_on_the_page_is_accepted():
    """A key on the page is a parameter Tango reads, or a field of a block such a parameter
    takes (`adapter.r`: a field of the adapter's dataclass)."""
    code = accepted()
    for name, keys in page_keys(PAGE.read_text()).items():
        assert name in code, f"{name}: on the page but not registered"
        params = code[name]
        for key in keys:
            top, _, field = key.partition(".")
            assert top in params, f"{name}.{key}: on the page but not accepted"
            if field:
                assert field_of(params[top].annotation, field), f"{name}.{key}: no such field"


def field_of(annotation: object, dotted: str) -> bool:
    """Whether `dotted` names a field of a dataclass the annotation takes (or of a subclass)."""
    head, _, rest = dotted.partition(".")
    for cls in gen_keys.dataclasses_in(annotation):
        hints = typing.get_type_hints(cls)
        if head in {f.name for f in dataclasses.fields(cls)}:
            return not rest or field_of(hints[head], rest)
    return False


def test_a_key_added_to_a_step_without_the_page_fails(monkeypatch):
    """What happens when someone adds a key to `catwalk::evaluate` and forgets the page: the
    comparison above fails, naming the key."""
    from catwalk_steps.steps.evaluate import Evaluate

    original = inspect.signature(Evaluate.run, eval_str=True)
    extra = inspect.Parameter("new_key", inspect.Parameter.KEYWORD_ONLY, default=3, annotation=int)
    run = Evaluate.run

    def with_new_key(self, *args, **kwargs):
        return run(self, *args, **kwargs)

    with_new_key.__signature__ = original.replace(  # type: ignore[attr-defined]
        parameters=[*original.parameters.values(), extra]
    )
    monkeypatch.setattr(Evaluate, "run", with_new_key)
    fresh = gen_keys.render()
    assert fresh != PAGE.read_text()
    assert "| `new_key` | `int` | `3` |" in page_keys_section(fresh, "catwalk::evaluate")
    with pytest.raises(pytest.fail.Exception, match="new_key"):
        test_the_committed_page_is_what_the_code_gives()


def page_keys_section(text: str, name: str) -> str:
    start = text.index(f"### `{name}`")
    return text[start : text.index("\n### ", start + 1)]


def test_notes_name_only_keys_that_exist():
    """docs/keys_notes.yml fills in what the code does not document yet; a note for a key that
    does not exist (renamed, removed) is stale."""
    import yaml

    notes = yaml.safe_load(gen_keys.NOTES.read_text())
    listed = page_keys(PAGE.read_text())
    every_name = {
        name
        for names in Registrable._registry.values()
        for name, (target, _) in names.items()
        if name.startswith("catwalk::")
    }
    for component, keys in notes.items():
        assert component in every_name, f"keys_notes.yml: {component} is not registered"
        sections = [listed[k] for k in listed if k[1] == component]
        assert sections, f"keys_notes.yml: {component} has no section on the page"
        stale = set(keys) - set().union(*sections)
        assert not stale, f"keys_notes.yml: {component} has no key {sorted(stale)}"


def test_every_supplied_parameter_still_exists():
    """The parameters the code passes itself (left off the page) are still parameters."""
    for base, names in gen_keys.supplied().items():
        found: set[str] = set()
        for registry, entries in Registrable._registry.items():
            if registry.__name__ != base:
                continue
            for target, _ in entries.values():
                found |= set(inspect.signature(target).parameters)
                for cls in getattr(target, "__mro__", ()):  # the bases it passes **kwargs to
                    if "__init__" in vars(cls):
                        found |= set(inspect.signature(cls.__init__).parameters)
        assert names <= found, (base, sorted(names - found))


def test_every_key_on_the_page_says_what_it_is():
    """Each row has a text: a docstring or comment in the code, else docs/keys_notes.yml."""
    empty = [line for line in PAGE.read_text().splitlines() if re.match(r"^\| `.*\|  \|$", line)]
    assert not empty, f"keys without a text (add a :param: or a note): {empty[:5]}"


def passes_keys_unlisted(cls: type) -> bool:
    """Whether Tango hands `cls` keys that no signature names: a constructor taking `**kwargs`
    that reach a class Tango does not read (a torch class), where the page cannot list them."""
    from tango.common.from_params import FromParams

    if cls.__init__ is object.__init__:  # no constructor: Tango gives it no keys
        return False
    signature = inspect.signature(cls.__init__)
    if not any(p.kind == p.VAR_KEYWORD for p in signature.parameters.values()):
        return False
    # Tango reads the next FromParams class's constructor for them (as `infer_method_params`);
    # one with no constructor of its own (Registrable's) hands them on unread.
    above = next((c for c in cls.mro()[1:] if issubclass(c, FromParams)), None)
    if above is None or above.__init__ is object.__init__:
        return True
    return passes_keys_unlisted(above)


def test_no_component_passes_keys_the_page_cannot_list():
    """A component whose `**kwargs` go on to a class Tango does not read (`catwalk::sharded`
    did, to torch's DataLoader: `num_workers` worked and was on no page) names each key it
    passes, so the page lists it and Tango refuses any other in one line."""
    unlisted = [
        names
        for targets in gen_keys.registered().values()
        for target, names in targets.items()
        if inspect.isclass(target) and not issubclass(target, Step) and passes_keys_unlisted(target)
    ]
    assert not unlisted, f"these pass keys through **kwargs unlisted: {unlisted}"
    sharded = page_keys(PAGE.read_text())[("Data loaders", "catwalk::sharded")]
    assert {"num_workers", "pin_memory", "prefetch_factor", "timeout", "drop_last"} <= sharded
