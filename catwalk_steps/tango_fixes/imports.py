"""Each `--include-package` walked once per process, not once per step.

Tango 1.3.2 imports every included package and all its submodules again before every step it
runs (`Executor.execute_step`), and so do our workers and slots as they start: each time it
walks the package's directories and clears the import system's caches once per module. For
this package (~190 modules) that was 0.02 s of CPU per step and per worker, for modules that
were all imported already, plus the import caches rebuilt by the next import. A process that
has walked a package whole (or was forked from one that had) now returns at once; a package
given as a path, or with modules excluded, is walked as Tango walks it.
"""

from __future__ import annotations

import functools
from typing import Any

import tango.common.util

from catwalk_startup.patching import patch

WALKED: set[str] = set()  # packages this process (or the one it was forked from) walked whole


def walk_each_package_once() -> None:
    def wrap(original: Any) -> Any:
        @functools.wraps(original)
        def import_module_and_submodules(
            package_name: str, exclude: Any = None, recursive: bool = True
        ) -> None:
            a_path = "/" in package_name or package_name.endswith(".py")  # as Tango tells
            whole = recursive and not exclude and not a_path
            if whole and package_name in WALKED:
                return
            original(package_name, exclude=exclude, recursive=recursive)
            if whole:
                WALKED.add(package_name)

        return import_module_and_submodules

    patch(tango.common.util, "import_module_and_submodules", "walk_each_package_once", wrap)


walk_each_package_once()
