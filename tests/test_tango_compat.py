"""The named fixes to Tango 1.3.2: run metadata that records without failing, the patch
mechanism itself (applied once, refused on a Tango it was not checked against), the logging
fixes, and, for every fix, what it relies on in Tango, so that a changed Tango fails here."""

from __future__ import annotations

import subprocess
import sys
import types
from importlib import metadata

import pytest
from tango.step_info import EnvironmentMetadata

from catwalk_startup import patching
from catwalk_steps.tango_fixes.run_metadata import (
    git_metadata_or_none,
    record_environment_without_failures,
)


def test_a_repository_without_commits_records_no_git_metadata(tmp_path, monkeypatch):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    monkeypatch.chdir(tmp_path)
    assert git_metadata_or_none() is None
    assert EnvironmentMetadata().git is None  # Tango's own factory raised ValueError here


def test_git_metadata_is_looked_up_once_per_directory(tmp_path, monkeypatch):
    """GitPython's look-up (subprocesses, ~0.3 s of CPU) ran for every step's record."""
    from tango.step_info import GitMetadata

    from catwalk_steps.tango_fixes.run_metadata import git_metadata_in

    looked = []
    monkeypatch.setattr(GitMetadata, "check_for_repo", lambda: looked.append(1))
    git_metadata_in.cache_clear()
    for directory in (tmp_path / "a", tmp_path / "a", tmp_path / "b"):
        directory.mkdir(exist_ok=True)
        monkeypatch.chdir(directory)
        EnvironmentMetadata()
    assert len(looked) == 2
    git_metadata_in.cache_clear()


def test_packages_are_recorded_where_pkg_resources_cannot_be_imported(monkeypatch):
    """Tango's own factory imports pkg_resources (gone from current setuptools); the record
    holds every installed distribution's version without it."""
    import sys

    monkeypatch.setitem(sys.modules, "pkg_resources", None)  # `import pkg_resources` fails
    recorded = dict(EnvironmentMetadata().packages)
    assert recorded["torch"] == metadata.version("torch")
    assert recorded["transformers"] == metadata.version("transformers")
    assert len(recorded) == len({d.metadata["Name"] for d in metadata.distributions()})


def test_a_patch_is_applied_once():
    patched = EnvironmentMetadata.__init__
    record_environment_without_failures()
    assert EnvironmentMetadata.__init__ is patched


def test_a_patch_refuses_another_tango_version_in_one_line(monkeypatch):
    monkeypatch.setattr(metadata, "version", lambda name: "1.4.0")
    owner = types.SimpleNamespace(f=lambda: 1)
    with pytest.raises(patching.TangoChanged) as error:
        patching.patch(owner, "f", "a_fix", lambda original: original)
    assert str(error.value) == (
        "catwalk_steps: the patch 'a_fix' was checked against ai2-tango 1.3.2, but 1.4.0 is "
        "installed; install ai2-tango==1.3.2 (as pyproject.toml pins it) or check the patch "
        "against the new code"
    )


def test_a_patch_of_something_tango_no_longer_has_says_so():
    owner = types.ModuleType("tango_somewhere")
    with pytest.raises(patching.TangoChanged, match="replaces tango_somewhere.gone, which"):
        patching.patch(owner, "gone", "a_fix", lambda original: original)


def test_a_patched_classmethod_stays_a_classmethod():
    class Owner:
        @classmethod
        def name(cls):
            return cls.__name__

    patching.patch(Owner, "name", "shout", lambda f: lambda cls: f(cls).upper())
    assert Owner.name() == "OWNER"
    assert isinstance(vars(Owner)["name"], classmethod)


def test_a_patch_names_a_class_of_a_module_and_replaces_what_it_inherits_there_alone():
    """A dotted attribute is looked up once the version is checked (a Tango that lacks the
    class is the one line, not an AttributeError); an inherited method is replaced on the class
    named, its base left as it was."""
    base = type("Base", (), {"f": lambda self: 1})
    module = types.ModuleType("tango_somewhere")
    module.Child = type("Child", (base,), {})
    patching.patch(module, "Child.f", "plus_one", lambda f: lambda self: f(self) + 1)
    assert module.Child().f() == 2 and base().f() == 1
    assert patching.patched(module.Child.f) == "plus_one" and patching.patched(base.f) is None
    with pytest.raises(patching.TangoChanged, match="replaces tango_somewhere.Gone.f, which"):
        patching.patch(module, "Gone.f", "a_fix", lambda original: original)


def test_every_patch_made_from_interpreter_start_is_a_named_version_checked_patch(monkeypatch):
    """catwalk_startup's patches go through the one mechanism (catwalk_startup/patching.py),
    as the package's do: each replacement carries its patch's name, and each patch refuses a
    Tango it was not checked against (they used to mark themselves with flags of their own)."""
    import multiprocessing.forkserver as forkserver

    import tango.common.logging as tango_logging
    import tango.common.params as tango_params
    import tango.settings as tango_settings
    from tango.common.registrable import Registrable

    import catwalk_startup
    from catwalk_startup import checked, fork_requests, registry_search

    logs, drops = "log records as JSON", "records a handler cannot write dropped"
    named = [
        (tango_logging.LogRecordStreamHandler.handle, logs),
        (tango_logging.LogRecordStreamHandler.unPickle, logs),
        (tango_logging.LogRecordSocketReceiver.__init__, logs),
        (tango_logging._initialize_logging, logs),
        (tango_logging.RichHandler.emit, drops),
        (tango_logging.RichHandler.handleError, drops),
        (tango_settings.TangoGlobalSettings.default, "our settings where Tango finds none"),
        (tango_params.evaluate_file, "the experiment library found from any directory"),
        (Registrable.search_modules, registry_search.PATCH),
        (forkserver.reduction, fork_requests.PATCH),  # (imported: applied in this process)
    ]
    assert [patching.patched(attribute) for attribute, _ in named] == [n for _, n in named]
    monkeypatch.setattr(checked, "installed", lambda package: "1.4.0")
    for module, patch_module in catwalk_startup.PATCHES.items():
        with pytest.raises(patching.TangoChanged, match="but 1.4.0 is installed"):
            patch_module(sys.modules[module])


def test_registrable_search_modules_is_wrapped_once_and_does_both_jobs():
    """One wrap, made from interpreter start (catwalk_startup/registry_search.py), around Tango's
    own search: the package, imported since, added none (it used to wrap it a second time to
    say unknown types). A `catwalk::` name not yet registered imports the package (tests/
    test_any_directory.py: from a directory without our tango.yml); one still unknown is one
    line naming the closest."""
    from tango import Step
    from tango.common.registrable import Registrable

    from catwalk_startup.registry_search import PATCH, UnknownTypeError

    search = Registrable.search_modules
    assert patching.patched(search) == PATCH
    assert search.__wrapped__.__module__ == "tango.common.registrable"  # Tango's, not a wrap
    with pytest.raises(UnknownTypeError) as error:
        Step.resolve_class_name("catwalk::trian")
    assert str(error.value).startswith(
        "unknown step type 'catwalk::trian'; did you mean 'catwalk::train'? (registered: "
    )
    # Another namespace is searched as Tango searches it, twice over: Tango's second import of
    # an integration that failed the first time (transformers 5) is passed over too.
    for _ in range(2):
        with pytest.raises(UnknownTypeError, match="^unknown step type 'my_pkg::trian'"):
            Step.resolve_class_name("my_pkg::trian")


def test_errors_are_one_line_on_the_terminal_and_whole_in_the_log_file(tmp_path, monkeypatch):
    """Tango's handlers as `_initialize_logging` leaves them (the terminal's filtered by
    catwalk_startup), then the run's log file added, as `tango run` adds it: the terminal shows
    the one line, the log file keeps the traceback, and a worker's traceback reaches only the
    file."""
    import io
    import logging

    import tango.common.logging as tango_logging
    from tango.common.exceptions import ConfigurationError

    from catwalk_startup.one_line import TRACEBACK_LOGGER, one_line_on_the_terminal

    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(root, "level", logging.INFO)
    monkeypatch.delenv("CATWALK_TRACEBACKS", raising=False)
    terminal = io.StringIO()
    root.addHandler(logging.StreamHandler(terminal))
    one_line_on_the_terminal(root)  # what the patched `_initialize_logging` does
    log_file = tmp_path / "out.log"
    root.addHandler(logging.FileHandler(log_file))
    logging.getLogger(TRACEBACK_LOGGER).error("rank 1 failed:\nTraceback ...")
    try:
        raise ConfigurationError("train.grad_accum: must be a whole number >= 1, got 0")
    except ConfigurationError as e:
        tango_logging.log_exc_info(type(e), e, e.__traceback__)
    for handler in root.handlers:
        handler.flush()
    assert terminal.getvalue() == (
        "ConfigurationError: train.grad_accum: must be a whole number >= 1, got 0\n"
    )
    kept = log_file.read_text()
    assert "Traceback (most recent call last)" in kept and "rank 1 failed:" in kept


def test_a_log_file_that_cannot_be_written_drops_its_records_without_a_traceback(capsys):
    """The run's log file on a full disk (Tango's RichHandler over a file whose writes fail
    with ENOSPC): a message and a table are dropped, where logging printed a "Logging error"
    traceback per record and the table ended the command; any other error still reports."""
    import errno
    import io
    import logging

    import tango.common.logging as tango_logging
    from rich.console import Console
    from rich.table import Table

    class FullDisk(io.StringIO):
        def write(self, text: str) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

    class Broken(io.StringIO):
        def write(self, text: str) -> int:
            raise ValueError("not the disk")

    handler = tango_logging.RichHandler(console=Console(file=FullDisk(), width=80))
    logger = logging.getLogger("catwalk_test_full_disk")
    logger.propagate = False
    logger.addHandler(handler)
    try:
        logger.error("DiskFullError: /ws/model.pt: not written, the disk is full")
        logger.info(Table("step", "status"))
        assert capsys.readouterr().err == ""
        handler.console = Console(file=Broken(), width=80)
        logger.error("reported")
        assert "ValueError: not the disk" in capsys.readouterr().err
    finally:
        logger.removeHandler(handler)


def test_tangos_logging_is_patched_where_it_makes_its_handlers():
    """The fixes of catwalk_startup hold on to what Tango 1.3.2 has: a receiver whose handler
    reads records, and one function that sets up every handler."""
    import tango.common.logging as tango_logging

    from catwalk_startup.log_records import handle_connection

    assert tango_logging.LogRecordStreamHandler.handle is handle_connection
    assert patching.patched(tango_logging._initialize_logging) == "log records as JSON"


# --- What each fix relies on in Tango 1.3.2: these fail when Tango changes under a fix ---------


def test_tangos_own_names_build_ours():
    """tango_fixes/names.py: `-w DIR` (a `local://` URL), `type: local` and the old model name."""
    from tango.integrations.torch import Model
    from tango.workspace import Workspace

    from catwalk_steps.engines.fairscale_engine import with_wrapped_modules
    from catwalk_steps.workspace.shared import SharedLocalWorkspace

    assert Workspace.resolve_class_name("local")[0] is SharedLocalWorkspace
    assert Workspace.resolve_class_name("catwalk::local")[0] is SharedLocalWorkspace
    assert Model.resolve_class_name("fairscale::with_wrapped_modules")[0] is with_wrapped_modules
    assert getattr(Workspace.from_url, "_catwalk_patch", None) is None  # through the registry


def test_a_plain_workspace_directory_gets_the_shared_workspace(tmp_path):
    from tango.workspace import Workspace

    from catwalk_steps.workspace.shared import SharedLocalWorkspace

    assert type(Workspace.from_url(str(tmp_path / "ws"))) is SharedLocalWorkspace


def test_the_local_workspace_still_has_what_the_shared_one_extends(tmp_path):
    """workspace/shared.py reads and overrides these private parts of LocalWorkspace."""
    from tango.workspaces import LocalWorkspace

    workspace = LocalWorkspace(tmp_path)
    assert str(workspace.step_info_file).endswith("stepinfo.sqlite")
    assert workspace.locks == {}
    for private in ("_step_lock_file", "_fix_step_info"):
        assert callable(getattr(workspace, private)), private
    overridden = ("step_info", "step_starting", "step_finished", "step_failed", "register_run")
    for method in (*overridden, "remove_step"):
        assert method in vars(LocalWorkspace), method


def test_the_step_cache_still_has_its_memory_and_metadata_seams(tmp_path):
    """workspace/step_cache.py overrides the in-memory cache and reads the metadata's path."""
    from tango import Step
    from tango.step_caches import LocalStepCache

    class Plain(Step):
        def run(self) -> int:
            return 1

    cache = LocalStepCache(tmp_path)
    step = Plain(step_name="plain")
    assert cache._metadata_path(step) == cache.step_dir(step) / "cache-metadata.json"
    cache[step] = 1
    assert cache._get_from_cache(step.unique_id) == 1  # written results are held in memory
    cache._add_to_cache("other", 2)
    assert cache._get_from_cache("other") == 2


def test_a_step_still_turns_its_inputs_into_results_through_one_method(tmp_path):
    """steps/evaluate.py overrides `_replace_steps_with_results` (Tango 1.3.2 offers no public
    seam: it replaces every dependency by its whole result before `run`): a step that overrides
    it gets what the override returns, and the dependency's result is not read."""
    from tango import Step

    from catwalk_steps.workspace.shared import SharedLocalWorkspace

    class Source(Step):
        def run(self) -> int:  # type: ignore[override]
            return 1

    class Handle(Step):
        def _replace_steps_with_results(self, o, workspace):
            if isinstance(o, Source):
                return "a handle"
            return super()._replace_steps_with_results(o, workspace)

        def run(self, source) -> str:  # type: ignore[override]
            return source

    workspace = SharedLocalWorkspace(tmp_path / "ws")
    step = Handle(step_name="handle", source=Source(step_name="source"), cache_results=False)
    assert step.result(workspace) == "a handle"


def test_lazy_still_keeps_its_config_where_we_read_it():
    from tango.common import Lazy, Params
    from tango.integrations.torch import Model

    from catwalk_steps.components import lazy_params

    lazy = Lazy(Model, Params({"type": "transformers::AutoModelForCausalLM::from_config"}))
    assert lazy_params(lazy) == {"type": "transformers::AutoModelForCausalLM::from_config"}


def test_the_executor_still_has_what_catwalk_executor_uses(tmp_path):
    """tango_fixes/executor.py and parallel/: the executor tango.yml names, its attributes, and
    what the slots of `--parallelism` call (a graph written with its unique ids and read back,
    one step executed, a child's prefixed logging)."""
    import inspect

    from tango.common import Params
    from tango.common.logging import initialize_prefix_logging
    from tango.executor import Executor
    from tango.step_graph import StepGraph

    from catwalk_steps.tango_fixes.executor import CatwalkExecutor
    from catwalk_steps.workspace.shared import SharedLocalWorkspace

    workspace = SharedLocalWorkspace(tmp_path)
    built = Executor.from_params(
        Params({"type": "catwalk::executor"}), workspace=workspace, include_package=["x"]
    )
    assert isinstance(built, CatwalkExecutor)
    assert (built.workspace, built.include_package, built.parallelism) == (workspace, ["x"], None)
    assert list(inspect.signature(Executor.execute_step_graph).parameters) == [
        "self",
        "step_graph",
        "run_name",
    ]
    assert list(inspect.signature(Executor.execute_step).parameters) == ["self", "step"]
    assert "include_unique_id" in inspect.signature(StepGraph.to_file).parameters
    assert "filename" in inspect.signature(StepGraph.from_file).parameters
    assert {"prefix", "main_process"} <= set(
        inspect.signature(initialize_prefix_logging).parameters
    )


def test_an_included_package_is_walked_once_per_process(tmp_path, monkeypatch):
    """tango_fixes/imports.py: Tango imports every `--include-package` again before each step
    (and each worker and slot as it starts); once walked whole, a package is not walked again,
    while one walked with modules excluded is walked as Tango walks it."""
    import importlib
    import sys

    import tango.common.util
    from tango.common.util import import_extra_module, import_module_and_submodules

    from catwalk_steps.tango_fixes import imports

    # what this test walks is forgotten after it (the workers of later tests import the list)
    extra = tango.common.util._extra_imported_modules
    monkeypatch.setattr(tango.common.util, "_extra_imported_modules", set(extra))
    monkeypatch.setattr(imports, "WALKED", set(imports.WALKED))
    package = tmp_path / "walked_once"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "inner.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    import_extra_module("walked_once")
    import_extra_module("catwalk_steps")
    assert "walked_once.inner" in sys.modules
    cleared: list[int] = []
    original = importlib.invalidate_caches
    monkeypatch.setattr(importlib, "invalidate_caches", lambda: cleared.append(1) or original())
    import_extra_module("walked_once")
    import_extra_module("catwalk_steps")
    assert cleared == []
    import_module_and_submodules("walked_once", exclude={"walked_once.other"})
    assert len(cleared) == 2  # the package and its module, walked as Tango walks them


def test_tangos_messages_are_still_the_ones_we_parse():
    """tango_fixes/registry.py, tasks/base.py and catwalk_startup/one_line.py read Tango's
    message text (it gives no field naming the key): each pattern matches what Tango says."""
    import inspect

    from tango import __main__ as tango_main
    from tango.common import Params
    from tango.common.exceptions import ConfigurationError
    from tango.common.params import with_overrides

    from catwalk_startup.one_line import TANGO_TYPE, UNKNOWN_STEP, UNUSED_OVERRIDES
    from catwalk_steps.tango_fixes.registry import EXTRA_PARAMETERS, unknown_key_message
    from catwalk_steps.tasks import Task

    with pytest.raises(ConfigurationError) as extra:
        Params({"train_stpes": 10}).assert_empty("TrainRankClassifier")
    assert EXTRA_PARAMETERS.match(str(extra.value))
    assert unknown_key_message(str(extra.value)).startswith(
        "catwalk::train: unknown key 'train_stpes'; did you mean 'train_steps'?"
    )
    with pytest.raises(ConfigurationError, match="has no such key"):
        Task.from_params({"type": "catwalk::task", "name": "piqa", "data_dir": "/x"})
    with pytest.raises(TypeError) as wrong_type:
        Task.from_params({"type": "catwalk::task", "name": "piqa", "num_fewshot": "2"})
    assert TANGO_TYPE.fullmatch(str(wrong_type.value)), str(wrong_type.value)
    with pytest.raises(ValueError) as unused:
        with_overrides({"steps": {}}, {"stpes.train": 1})
    assert UNUSED_OVERRIDES.match(str(unused.value))
    source = inspect.getsource(tango_main._run)  # its -s check, an assert
    assert "You want to run a step called" in source and "The config contains" in source
    message = f"You want to run a step called 'x', but it cannot be found in the experiment config. The config contains: {['a', 'b']}."  # noqa: E501
    assert UNKNOWN_STEP.match(message)


def test_every_patch_of_fairscale_and_torch_refuses_another_version(monkeypatch):
    """One table of checked versions (catwalk_startup/checked.py); a local build of a checked
    release passes (2.13.0+cpu), another release fails in one line naming package and patch."""
    from catwalk_startup import checked

    assert checked.is_checked("torch", "2.13.0+cpu") and checked.is_checked("torch", "2.11.1")
    assert not checked.is_checked("torch", "2.14.0") and not checked.is_checked("torch", "2.1.0")
    versions = {"fairscale": "0.4.14", "torch": "2.13.0"}
    monkeypatch.setattr(metadata, "version", lambda name: versions[name])
    with pytest.raises(patching.PackageChanged) as error:
        patching.check_version("fairscale", "FairScale FSDP on CPU workers")
    assert str(error.value) == (
        "catwalk_steps: the patch 'FairScale FSDP on CPU workers' was checked against fairscale "
        "0.4.13, but 0.4.14 is installed; install fairscale==0.4.13 (as pyproject.toml pins it) "
        "or check the patch against the new code"
    )
    patching.check_version("torch", "parameters on the meta device")  # 2.13.0: checked


def test_fairscales_and_torchs_patches_are_named_patches_applied_once(monkeypatch):
    """The CPU shims and the frozen units' consolidation go through the one mechanism too
    (they kept flags of their own): each replacement wraps the library's own, once."""
    import torch
    from fairscale.internal import reduce_scatter_bucketer
    from fairscale.nn.data_parallel import FullyShardedDataParallel, fsdp_optim_utils
    from fairscale.nn.data_parallel import fully_sharded_data_parallel as fsdp_module

    from catwalk_steps.engines import fairscale_cpu, fairscale_frozen

    # (the patches stay installed in this process, inert once the worker device is unset again)
    monkeypatch.setattr(fairscale_cpu, "_worker_device", fairscale_cpu._worker_device)
    for _ in range(2):
        fairscale_cpu.use_worker_device("cpu")
        fairscale_frozen.patch_frozen_units()
    cpu, frozen = fairscale_cpu.PATCH, fairscale_frozen.PATCH
    named = [
        (fsdp_module.torch, cpu),
        (fsdp_module._get_default_cuda_device, cpu),
        (FullyShardedDataParallel._setup_streams, cpu),
        (fsdp_module.calc_grad_norm, cpu),
        (reduce_scatter_bucketer.dist, cpu),
        (torch.Tensor.record_stream, f"{cpu} (Tensor.record_stream)"),
        (FullyShardedDataParallel._gather_optim_state, cpu),
        (fsdp_optim_utils._unflatten_optim_state, frozen),
    ]
    assert [patching.patched(attribute) for attribute, _ in named] == [n for _, n in named]
    assert not any(patching.patched(attribute.__wrapped__) for attribute, _ in named)


def test_the_log_record_patch_refuses_another_tango_instead_of_leaving_pickles(monkeypatch):
    """catwalk_startup used to leave Tango's pickle-reading log receiver in place, silently."""
    import catwalk_startup
    from catwalk_startup import checked

    monkeypatch.setattr(checked, "installed", lambda package: "1.4.0")
    module = types.ModuleType("tango.common.logging")
    with pytest.raises(ImportError) as error:
        catwalk_startup.patch_logging(module)
    assert str(error.value).startswith(
        "catwalk_steps: the patch 'log records as JSON' was checked against ai2-tango 1.3.2, but "
        "1.4.0 is installed"
    )


def test_a_sub_graph_keeps_one_step_under_two_names():
    """`tango run -s rlvr_trained`: its data is the SFT stage's data under another name (one
    step, one unique id); the sub-graph has both names, the step that needs it too (Tango's
    own gathered the dependencies as a set by unique id and failed to order them)."""
    from tango.step_graph import StepGraph

    load = {"type": "catwalk::load_task", "task": {"type": "catwalk::synthetic"}}
    graph = StepGraph.from_params(
        {
            "sft_data": dict(load),
            "rlvr_data": dict(load),
            "report": {
                "type": "catwalk::report",
                "metrics": {"a": {"type": "ref", "ref": "sft_data"}},
            },
            "rlvr_report": {
                "type": "catwalk::report",
                "metrics": {
                    "a": {"type": "ref", "ref": "rlvr_data"},
                    "b": {"type": "ref", "ref": "report"},
                },
            },
        }
    )
    assert graph["sft_data"].unique_id == graph["rlvr_data"].unique_id
    sub = graph.sub_graph("rlvr_report")
    assert set(sub.parsed_steps) == {"sft_data", "rlvr_data", "report", "rlvr_report"}
    with pytest.raises(KeyError, match="not a part of this StepGraph"):
        graph.sub_graph("missing")
