"""How `tango run` changes where Tango 1.3.2 falls short: one module per fix, each saying what it
replaces and why, each refusing to apply to a Tango it was not checked against
(:mod:`catwalk_startup.patching`). Importing the package applies them.

- :mod:`.executor`: `catwalk::executor` (named in tango.yml): each model's evaluations together,
  the reports printed after every run, SIGTERM treated as Ctrl-C;
- :mod:`.registry`: an unknown key says so and suggests the closest (an unknown `type`:
  :mod:`catwalk_startup.registry_search`);
- :mod:`.run_metadata`: the run's environment recorded without failing;
- :mod:`.names`: Tango's own names for what catwalk_steps replaces (`local`,
  `fairscale::with_wrapped_modules`), so that `-w DIR` and old configs get ours;
- :mod:`.path`: `--parallelism` finds `tango` without an activated venv;
- :mod:`.imports`: each `--include-package` walked once per process, not before every step;
- :mod:`.sub_graph`: `tango run -s STEP` finds the steps it needs by name (one step under two
  names no longer fails).

(What must apply before Tango reads an experiment, its log records and one-line errors, is in
the top-level :mod:`catwalk_startup`.)
"""

from . import executor, imports, names, path, registry, run_metadata, sub_graph  # noqa: F401
from .executor import CatwalkExecutor

__all__ = ["CatwalkExecutor"]
