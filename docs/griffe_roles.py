"""A griffe extension for the API pages (mkdocs.yml): the package's docstrings cite code with
Sphinx roles (:class:`Scorer`, :meth:`TaskKind.update`, :mod:`~catwalk_steps.kinds`), which
Markdown would show as they are written; here each becomes inline code."""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension

ROLE = re.compile(r":(?:class|meth|func|mod|attr|data|obj|exc|cvar|const):`~?\.?([^`]+)`")


class SphinxRoles(Extension):
    def on_instance(self, *, obj: Any, **kwargs: Any) -> None:
        docstring = getattr(obj, "docstring", None)
        if docstring is not None:
            docstring.value = ROLE.sub(r"`\1`", docstring.value)
