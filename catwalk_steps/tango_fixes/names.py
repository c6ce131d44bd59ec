"""Tango's own names for what catwalk_steps replaces, so that what users already type gets ours.

Our components are registered under `catwalk::` names (`catwalk::local`, the workspace several
jobs share; `catwalk::with_wrapped_modules`, the model constructor with catwalk's matching), and
tango.yml and the experiments name those. Tango's names are bound to the same classes through
Tango's own registry (`Registrable.register(name, exist_ok=True)`, its public way to replace a
registration):

- `local`: what `-w DIR`, `local://DIR` and `workspace: {type: local}` build. Tango's
  `LocalWorkspace` fails when two jobs share a directory (see :mod:`..workspace.shared`); `-w`
  takes no type, so without this a plain `-w DIR` would get it.
- `fairscale::with_wrapped_modules`: existing configs that wrap inside the model block; ours
  takes the same parameters.
"""

from __future__ import annotations

from tango.integrations.torch import Model
from tango.workspace import Workspace

from ..engines.fairscale_engine import with_wrapped_modules
from ..workspace.shared import SharedLocalWorkspace

Workspace.register("local", exist_ok=True)(SharedLocalWorkspace)
# Tango registers a function as a constructor too; its annotation says a class.
Model.register("fairscale::with_wrapped_modules", exist_ok=True)(with_wrapped_modules)  # type: ignore[arg-type]
