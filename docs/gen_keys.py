"""Writes the configuration-keys page (docs/reference/keys.md) from the code, so it cannot drift.

`python docs/gen_keys.py` (`make keys`) rewrites the page; `--check` says whether the committed
page is what the code gives now (tests/test_docs_keys.py runs it: a key added to a step, an engine
or a settings class without the page fails the test).

What it reads, and nothing else: every component registered under Tango's registry by this
package (every `catwalk::` step, task, model, engine, loader, collator, callback, optimizer,
workspace, executor and format, with their other names), and for each the keys Tango itself
accepts: a step's `run` parameters, a component's constructor parameters (with its base class's
where it passes `**kwargs` on), as `tango.common.from_params` infers them. A key whose type is a
dataclass (an adapter block, `fsdp_config`) gets a row per field, and so does each dataclass
subclass of it. The text of a key is its docstring (`:param key:` / `:ivar key:` of the class,
its constructor, its `run`, or a base class), else the comment on its line in a dataclass of the
component's module (`TrainSettings`, `EvaluationSettings`), else `docs/keys_notes.yml`.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import sys
import typing
from pathlib import Path
from typing import Any

import yaml
from key_texts import dataclasses_in, default_text, docstring_texts, texts_for, type_text

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "reference" / "keys.md"
NOTES = ROOT / "docs" / "keys_notes.yml"
PACKAGE = "catwalk_steps"  # the same in key_texts

# Sections in reading order; a registry not named here follows, by its base class's name.
TITLES = {
    "Step": "Steps",
    "Task": "Tasks",
    "Model": "Models",
    "TrainingEngine": "Training engines",
    "Optimizer": "Optimizers",
    "DataLoader": "Data loaders",
    "DataCollator": "Collators",
    "TrainCallback": "Callbacks and trackers",
    "Workspace": "Workspaces (tango.yml)",
    "Executor": "Executors (tango.yml)",
    "Format": "Result formats",
    "Reward": "Rewards (GRPO's reward_funcs)",
}
# Parameters the code passes when it builds a component, never a key of a config: the package's
# own list (`catwalk_steps.components.SUPPLIED`, by config key, which its key checks use), by
# registry, and what Tango's loop and CLI give callbacks and executors. The test checks that each
# is still a parameter of some component of its registry.
REGISTRY_OF_KEY = {
    "model": "Model",
    "training_engine": "TrainingEngine",
    "optimizer": "Optimizer",
    "lr_scheduler": "LRScheduler",
    "train_dataloader": "DataLoader",
    "validation_dataloader": "DataLoader",
}
TANGO_SUPPLIED = {
    "TrainCallback": {
        "workspace",
        "train_config",
        "training_engine",
        "dataset_dict",
        "train_dataloader",
        "validation_dataloader",
    },
    "Executor": {"workspace", "include_package", "parallelism"},
}


def supplied() -> dict[str, set[str]]:
    """Registry name -> the parameters the code supplies to its components."""
    from catwalk_steps.components import SUPPLIED

    found = {base: set(names) for base, names in TANGO_SUPPLIED.items()}
    for key, names in SUPPLIED.items():
        found.setdefault(REGISTRY_OF_KEY.get(key, key), set()).update(names)
    return found


@dataclasses.dataclass(frozen=True)
class Key:
    name: str  # dotted for a dataclass's field: `adapter.r`
    type: str
    default: str
    text: str


@dataclasses.dataclass(frozen=True)
class Component:
    base: str
    names: tuple[str, ...]  # the `catwalk::` name first, then its other names, its old ones last
    target: Any  # the class or function registered
    keys: tuple[Key, ...]


# --- What Tango accepts -----------------------------------------------------------------------


def registered() -> dict[str, dict[Any, list[str]]]:
    """Base class name -> {registered class or function: its names}, for this package's."""
    from tango.common.registrable import Registrable

    import catwalk_steps  # noqa: F401  (registers everything)

    found: dict[str, dict[Any, list[str]]] = {}
    # Tango 1.3.2 lists a base class's names (`list_available`) but not the base classes: its
    # registry, base -> {name: (class or function, constructor name)}, is read here alone.
    for base, names in Registrable._registry.items():
        for name, (target, _constructor) in names.items():
            module = getattr(target, "__module__", "") or ""
            if name.startswith("catwalk::") or module.startswith(PACKAGE + "."):
                found.setdefault(base.__name__, {}).setdefault(target, []).append(name)
    return found


def parameters(base: str, target: Any) -> dict[str, inspect.Parameter]:
    """The keys Tango reads for `target`, as it infers them, less what the code supplies."""
    from tango import Step
    from tango.common.from_params import infer_constructor_params, infer_method_params

    if inspect.isclass(target) and issubclass(target, Step):
        found = infer_method_params(target, target.run)
    elif inspect.isclass(target):
        found = infer_constructor_params(target)
    else:  # a registered function
        found = dict(inspect.signature(target).parameters)
    skipped = supplied().get(base, set()) | {"self"}
    return {
        name: p
        for name, p in found.items()
        if name not in skipped and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    }


def step_common_keys() -> dict[str, inspect.Parameter]:
    """The keys every Tango step takes besides its own (`step_name`, `step_resources`, ...)."""
    from tango import Step

    found = inspect.signature(Step.__init__).parameters
    return {n: p for n, p in found.items() if n != "self" and p.kind == p.POSITIONAL_OR_KEYWORD}


def nested_keys(prefix: str, cls: type, depth: int = 0) -> list[Key]:
    hints = typing.get_type_hints(cls)
    texts = texts_for(cls)
    keys: list[Key] = []
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        default = field.default
        if default is dataclasses.MISSING and field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        annotation = hints.get(field.name, field.type)
        name = f"{prefix}.{field.name}"
        keys.append(
            Key(name, type_text(annotation), default_text(default), texts.get(field.name, ""))
        )
        if depth < 2:
            for inner in dataclasses_in(annotation):
                keys += nested_keys(name, inner, depth + 1)
    return keys


def keys_of(base: str, target: Any, notes: dict[str, str]) -> tuple[Key, ...]:
    texts = {**texts_for(target)}
    keys: list[Key] = []
    for name, p in parameters(base, target).items():
        text = texts.get(name) or notes.get(name, "")
        keys.append(Key(name, type_text(p.annotation), default_text(p.default), text))
        blocks = dataclasses_in(p.annotation)
        for cls in blocks:
            for key in nested_keys(name, cls):
                text = key.text or notes.get(key.name, "")
                if len(blocks) > 1:  # which block type the key belongs to
                    text = f"({cls.__name__}) {text}".strip()
                keys.append(dataclasses.replace(key, text=text))
    return tuple(keys)


# --- The page ---------------------------------------------------------------------------------


def components() -> list[Component]:
    notes = yaml.safe_load(NOTES.read_text()) if NOTES.exists() else {}
    found = registered()
    bases = [b for b in TITLES if b in found] + sorted(b for b in found if b not in TITLES)
    result: list[Component] = []
    for base in bases:
        for target, names in found[base].items():
            old = set(getattr(target, "OLD_NAMES", ()))  # names it had before, kept working
            ordered = tuple(
                sorted(names, key=lambda n: (n in old, not n.startswith("catwalk::"), n))
            )
            component_notes = {}
            for name in ordered:
                component_notes.update((notes or {}).get(name) or {})
            keys = keys_of(base, target, component_notes)
            result.append(Component(base, ordered, target, keys))
    order = {b: i for i, b in enumerate(bases)}
    return sorted(result, key=lambda c: (order[c.base], c.names[0]))


def cell(text: str) -> str:
    text = re.sub(r":\w+:`~?\.*([^`]+)`", r"`\1`", text)  # Sphinx roles as code
    return " ".join(text.split()).replace("|", "\\|")


def code(key: Key) -> str:
    """A key's type as code without a pipe, which GitHub's tables would split on: `| None` goes
    when the default says `null`, other unions read "or"."""
    text = " ".join(key.type.split())
    if key.default == "`null`":
        text = re.sub(r" \| None\b", "", text)
    return text.replace(" | ", " or ")


def table(keys: tuple[Key, ...] | list[Key], sections: set[str]) -> list[str]:
    lines = ["| key | type | default | what it is |", "|---|---|---|---|"]
    for key in keys:
        kind = f"`{code(key)}`{see(key.type, sections)}"
        lines.append(f"| `{key.name}` | {kind} | {cell(key.default)} | {cell(key.text)} |")
    return lines


def see(type_name: str, sections: set[str]) -> str:
    """A link to the section of the registry a key's block comes from (`Lazy[TrainingEngine]`:
    the engines), when the page has one."""
    named = [base for base in sections if re.search(rf"\b{base}\b", type_name)]
    return "".join(f" ([{TITLES.get(b, b)}](#{anchor(TITLES.get(b, b))}))" for b in sorted(named))


def anchor(title: str) -> str:
    """The heading's id as Markdown's `toc` makes it."""
    return re.sub(r"[\s-]+", "-", re.sub(r"[^\w\s-]", "", title.lower())).strip("-")


def other_names(target: Any, others: list[str]) -> str:
    """` Also named ...` and the old names it is still read by (its `OLD_NAMES`)."""
    old = [name for name in others if name in getattr(target, "OLD_NAMES", ())]
    also = [name for name in others if name not in old]
    text = f" Also named {', '.join(f'`{n}`' for n in also)}." if also else ""
    if old:
        text += f" Its old name {', '.join(f'`{n}`' for n in old)} still works."
    return text


def render() -> str:
    lines = [
        "<!-- Generated by `python docs/gen_keys.py` (`make keys`) from the code: do not edit. -->",
        "# Configuration keys",
        "",
        "Every key of every component this package registers, read from the code: a step's keys "
        "are its `run` parameters, a component's its constructor's (as Tango reads them). A key "
        "whose value is a block of another component (`Lazy[...]`, `Task`) takes that "
        "component's keys, listed in its own section. `required` keys have no default; `null` "
        "is jsonnet's None. The shared pieces of experiment files (`lib.pipeline`, `lib.suite`, "
        "`lib.sweep`) are on [Experiments](../experiments.md) and [Sweeps](../sweeps.md).",
        "",
    ]
    all_components = components()
    sections = {c.base for c in all_components} - {"Step"}  # a step is never a block
    current = None
    for component in all_components:
        if component.base != current:
            current = component.base
            lines += [f"## {TITLES.get(current, current)}", ""]
            if current == "Step":
                lines += [
                    "Every step also takes Tango's own step keys "
                    "([below](#every-step-also-takes)).",
                    "",
                ]
        name, *others = component.names
        target = component.target
        where = f"{target.__module__}.{getattr(target, '__qualname__', target.__name__)}"
        lines += [f"### `{name}`", ""]
        lines += [f"`{where}`.{other_names(target, others)}", ""]
        lines += table(component.keys, sections) if component.keys else ["No keys."]
        lines.append("")
    from tango import Step

    texts = docstring_texts(Step.__doc__)
    common = [
        Key(n, type_text(p.annotation), default_text(p.default), texts.get(n, ""))
        for n, p in step_common_keys().items()
    ]
    lines += ["## Every step also takes", "", "Tango's `Step` keys, for any step.", ""]
    lines += table(common, sections) + [""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    args = parser.parse_args()
    page = render()
    if args.check:
        if PAGE.read_text() != page:
            print(f"{PAGE.relative_to(ROOT)} is stale: run `make keys` (python docs/gen_keys.py)")
            return 1
        return 0
    PAGE.write_text(page)
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
