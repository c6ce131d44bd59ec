"""`tango run -s STEP`: the steps it needs, found by name.

Tango 1.3.2's `StepGraph.sub_graph` gathers a step's `recursive_dependencies`, a set of steps
compared by unique id: of two steps that are the same step under two names (an RLVR stage's data
after an SFT stage's, both loading one task), the set keeps one, and the graph then misses the
other's name and fails with "Could not make progress parsing the steps ... circular reference".
The patch gathers the dependencies by walking each step's own, name by name, so that both names
stay (they are still one step in the cache: it runs once).
"""

from __future__ import annotations

from typing import Any

from tango.step_graph import StepGraph

from catwalk_startup.patching import patch


def needed_by_name(graph: StepGraph, names: tuple[str, ...]) -> dict[str, Any]:
    """The steps `names` need, themselves included, by each name the graph's config gives them;
    KeyError (as Tango's) for a name the graph has not."""
    found: dict[str, Any] = {}
    pending = []
    for name in names:
        if name not in graph.parsed_steps:
            raise KeyError(
                f"{name} is not a part of this StepGraph. "
                f"Available steps are: {list(graph.parsed_steps.keys())}"
            )
        pending.append(graph.parsed_steps[name])
    while pending:
        step = pending.pop()
        if step.name in found:
            continue
        found[step.name] = step
        pending.extend(step.dependencies)
    return found


def wrap(original: Any) -> Any:
    def sub_graph(self: StepGraph, *step_names: str) -> StepGraph:
        return StepGraph(needed_by_name(self, step_names))

    return sub_graph


patch(StepGraph, "sub_graph", "sub_graph_by_name", wrap)
