"""Keys in experiment files: a key a component does not take says so and suggests the closest
(Tango's message parsed). Unknown type names are said where Tango's search is wrapped, from
interpreter start (:mod:`catwalk_startup.registry_search`).
"""

from __future__ import annotations

import re

from catwalk_startup.one_line import closest

from ..errors import rewrite_messages

# Tango's message for a key that the component does not take. Tango 1.3.2 raises a bare
# ConfigurationError with no field naming the key, so its text is parsed; when the text changes
# the message is Tango's own (tests/test_tango_compat.py fails first).
EXTRA_PARAMETERS = re.compile(r"Extra parameters passed to (\w+): \{'([^']+)'")


def unknown_key_message(message: str) -> str | None:
    """Tango's "Extra parameters passed to TrainRankClassifier: {'train_stpes': 10}" said as
    "catwalk::train: unknown key 'train_stpes'; did you mean 'train_steps'? (keys: ...)"."""
    import inspect

    from tango import Step

    match = EXTRA_PARAMETERS.match(message)
    if match is None:
        return None
    class_name, key = match.groups()
    for name in Step.list_available():
        step_class: type[Step] = Step.resolve_class_name(name)[0]
        if step_class.__name__ != class_name:
            continue
        parameters = inspect.signature(step_class.run).parameters
        keys = sorted(p for p in parameters if p != "self")
        close = closest(key, keys)
        hint = f"did you mean '{close}'? " if close else ""
        return f"{name}: unknown key '{key}'; {hint}(keys: {', '.join(keys)})"
    return None


rewrite_messages(unknown_key_message)
