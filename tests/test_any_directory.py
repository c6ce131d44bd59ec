"""`tango run` from a directory that is not the repository's: without its tango.yml, without
`-i catwalk_steps` (catwalk_startup: our settings where Tango finds none, and `catwalk::` types
that import the package). A fresh interpreter each, as a user's: the command server has
imported the package already."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from . import commands
from .commands import error_lines
from .conftest import EXPERIMENTS, TINY_DEMO

pytestmark = pytest.mark.slow
TANGO = str(Path(sys.executable).with_name("tango"))


def tango_run_in(
    directory: Path, *extra: str, experiment: Path = EXPERIMENTS / "demo.jsonnet"
) -> str:
    """`tango run <absolute experiment>` in `directory`, no `-i`; its output (rc 0 asserted)."""
    argv = [TANGO, "run", str(experiment), "-o", json.dumps(TINY_DEMO), *extra]
    done = commands.run(argv, timeout=300, cwd=directory, fresh=True)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert error_lines(output) == [], output[-3000:]
    return output


def test_runs_without_settings_in_the_workspace_here(tmp_path: Path):
    """No tango.yml: the package's settings, its workspace `./workspace`, its reports."""
    output = tango_run_in(tmp_path)
    assert "Metrics" in output and "✓ 5 succeeded" in output
    assert "Tokenized 16 rows once in " in output  # at Tango's default log level
    assert list((tmp_path / "workspace" / "cache").glob("TrainRankClassifier-*"))


def test_a_copy_of_a_shipped_experiment_runs_anywhere_under_settings_of_ones_own(tmp_path: Path):
    """A copy of a shipped experiment outside the repository, run from another directory whose
    tango.yml names a workspace only: `import 'lib/pipeline.libsonnet'` finds the library the
    package ships (before: `RuntimeError: can't resolve lib/pipeline.libsonnet` in a 30-line
    traceback), the library's ext vars (`limit`) their defaults, and `catwalk::` types still
    import the package."""
    own = tmp_path / "own" / "own_demo.jsonnet"
    own.parent.mkdir()
    own.write_text((EXPERIMENTS / "demo.jsonnet").read_text())
    assert "import 'lib/pipeline.libsonnet'" in own.read_text()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "tango.yml").write_text("workspace:\n  type: local\n  dir: mine\n")
    output = tango_run_in(elsewhere, experiment=own)
    assert "✓ 5 succeeded" in output and "modeling_flax_auto" not in output
    assert list((elsewhere / "mine" / "cache").glob("TrainRankClassifier-*"))


def test_a_misspelt_type_under_settings_of_ones_own_is_one_line_naming_the_closest(tmp_path):
    """No `-i`, a tango.yml that includes nothing: the one wrap of Tango's search, made before
    the package is imported, imports it for the experiment's `catwalk::` names and says the
    misspelt one in one line (nothing runs)."""
    (tmp_path / "tango.yml").write_text("workspace:\n  type: local\n  dir: mine\n")
    misspelt = {**TINY_DEMO, "steps.trained.type": "catwalk::trian"}
    argv = [TANGO, "run", str(EXPERIMENTS / "demo.jsonnet"), "-o", json.dumps(misspelt)]
    done = commands.run(argv, timeout=300, cwd=tmp_path, fresh=True)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output[-3000:]
    (line,) = error_lines(output)
    said = "UnknownTypeError: unknown step type 'catwalk::trian'; did you mean 'catwalk::train'?"
    assert said in line and "modeling_flax_auto" not in output, output[-3000:]
    assert not list(tmp_path.glob("mine/cache/*"))  # nothing ran


def test_a_lib_beside_ones_own_experiment_comes_first(tmp_path: Path):
    """One's own copy of the library, beside the file, is the one imported (as jsonnet always
    resolved it)."""
    from tango.common.params import Params

    own = tmp_path / "exp.jsonnet"
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "pipeline.libsonnet").write_text("{ mine: true }")
    own.write_text("local lib = import 'lib/pipeline.libsonnet'; { value: lib }")
    assert Params.from_file(own).as_dict() == {"value": {"mine": True}}
    (tmp_path / "lib" / "pipeline.libsonnet").unlink()
    (tmp_path / "lib").rmdir()
    assert "engines" in Params.from_file(own).as_dict()["value"]  # the package's library
