"""`python -m catwalk_startup.bytecode`: bytecode for the modules this package runs, written
once at setup (`make setup` installs with `pip install --no-compile`).

Where `PYTHONDONTWRITEBYTECODE` is set (as on some shared machines and CI images), no
interpreter writes `__pycache__`: every new process would compile again each module it imports
(torch, transformers, Tango: seconds of CPU per process), so the bytecode has to be written at
install. pip writes it for every file of every package, about 2 GB of site-packages here: 40 s
of CPU, most of it for modules nothing imports. Importing what the package and its tests run,
with writing on, compiles the 3,000-odd modules they need in about 9 s; a module left out is
compiled in memory when it is imported, as before, never wrong.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

# Imported inside functions (so not by importing every module of the package): trackers,
# adapters, plots, data, the model families the tests build, the test runner.
LAZY = (
    "catwalk_startup.exit_with_parent",
    "datasets",
    "matplotlib.pyplot",
    "olmo_eval",
    "peft",
    "safetensors.torch",
    "tango.__main__",
    "tensorboard.backend.event_processing.event_accumulator",
    "torch.utils.tensorboard",
    "wandb",
    "pytest",
    "xdist",
    *(
        f"transformers.models.{family}.modeling_{family}"
        for family in ("gpt2", "gpt_neox", "llama", "mistral", "qwen2", "olmo2", "opt", "gemma")
    ),
)


def main() -> None:
    sys.dont_write_bytecode = False  # whatever the environment says, for this process
    import catwalk_steps

    names = [m.name for m in pkgutil.walk_packages(catwalk_steps.__path__, "catwalk_steps.")]
    for name in (*names, *LAZY):
        try:
            importlib.import_module(name)
        except ImportError as error:  # an optional module not installed: nothing to compile
            print(f"bytecode: {name} not compiled ({error})", file=sys.stderr)


if __name__ == "__main__":
    main()
