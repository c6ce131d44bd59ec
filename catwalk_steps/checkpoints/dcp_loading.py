"""An FSDP2 checkpoint loaded as data: every entry DCP stored as bytes is read weights-only.

torch.distributed.checkpoint stores tensors as tensor records, which its reader loads with
`torch.load(weights_only=True)`, and anything else (an optimizer's `param_groups`: learning rate,
betas, the parameters' names) as a torch.save blob inside a `.distcp` file, which its
`DefaultLoadPlanner.load_bytes` reads with `weights_only=False` (torch 2.13.0): a planted
blob ran code on every rank that resumed, and a `.metadata` made of DCP's own classes may say
that any entry, a model weight too, is such a blob. Every DCP load here goes through
:class:`DataPlanner`, which reads each blob as data and refuses one where the state holds a
tensor. Before any rank loads, :func:`check_entries` reads every blob of a checkpoint on its own
rank (no collective), so a planted or damaged entry costs that checkpoint, skipped by the resume
with the file named, never the run.

The tensors themselves DCP reads weights-only inside the collective load (its reader's
`torch.load(weights_only=True)`), so one written over (a pickle, zeros) runs nothing, but
its failure named neither file nor entry (`CheckpointException ranks:dict_keys([0])`) and was
no CheckpointError, so the resume never fell back. :class:`DataReader` names them: every rank
raises the same CheckpointError (DCP gathers each rank's failure to all), and the resume skips
that checkpoint on all of them together.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, cast

import torch
from torch.distributed.checkpoint import (
    BytesStorageMetadata,
    CheckpointException,
    DefaultLoadPlanner,
    LoadPlan,
    LoadPlanner,
    Metadata,
    ReadItem,
    TensorStorageMetadata,
)
from torch.distributed.checkpoint.planner import LoadItemType
from torch.futures import Future

from .dcp_metadata import (
    METADATA_FILE,
    MetadataCheckingReader,
    read_metadata,
    single_process_quietly,
)
from .layout import CheckpointError
from .state import load_data


class DataPlanner(DefaultLoadPlanner):
    """DCP's default load planner, reading every entry stored as bytes as data."""

    def __init__(self, directory: Path) -> None:
        super().__init__()
        self.directory = Path(directory)

    def create_local_plan(self) -> LoadPlan:
        plan = super().create_local_plan()
        for item in plan.items:
            name = item.dest_index.fqn
            if item.type == LoadItemType.BYTE_IO and torch.is_tensor(self.state_dict.get(name)):
                raise CheckpointError(stored_as_bytes(self.directory, name))
        return plan

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        data = load_data(value, self.entry(read_item))
        # DefaultLoadPlanner.load_bytes puts the entry in its place in the state (through the
        # flattening it planned with), unpickling what it is given with weights_only=False
        # (torch 2.13.0): it is given `data` saved again here, made of nothing but what the
        # weights-only reader built.
        super().load_bytes(read_item, saved(data))

    def entry(self, read_item: ReadItem) -> str:
        storage = self.metadata.storage_data if self.metadata else {}
        return entry_name(self.directory, storage, read_item)


def entry_name(directory: Path, storage: dict[Any, Any], read_item: ReadItem) -> str:
    """An entry, for messages: the file that holds it (`relative_path` of DCP's private
    `_StorageInfo`, which its file-system writer puts in the metadata; torch 2.13.0), and its
    name."""
    relative = getattr(storage.get(read_item.storage_index), "relative_path", None)
    path = Path(directory) / relative if relative else Path(directory)
    return f"{path} (entry '{read_item.dest_index.fqn}')"


class DataReader(MetadataCheckingReader):
    """DCP's file-system reader, its metadata read as data, whose failure to read a tensor
    names the file and the entry."""

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        try:
            return super().read_data(plan, planner)
        except CheckpointError:
            raise
        except Exception:
            self.refuse_unreadable(plan)  # a CheckpointError naming the entry, when it is one
            raise

    def refuse_unreadable(self, plan: LoadPlan) -> None:
        """This rank's tensor entries read again, each alone and as data, as DCP's reader reads
        them (the bytes the metadata points at, `torch.load(weights_only=True)`): the first
        that cannot be read is a CheckpointError naming its file and entry."""
        storage = self.storage_data  # what DCP's reader read its plan from (torch 2.11-2.13)
        for item in plan.items:
            info = storage[item.storage_index]
            if item.type == LoadItemType.BYTE_IO or info.transform_descriptors:
                continue  # bytes: read by DataPlanner; transformed: not what we write
            with open(Path(self.path) / info.relative_path, "rb") as f:
                f.seek(info.offset)
                where = entry_name(Path(self.path), storage, item)
                load_data(io.BytesIO(f.read(info.length)), where)


def saved(data: Any) -> io.BytesIO:
    buffer = io.BytesIO()
    torch.save(data, buffer)
    buffer.seek(0)
    return buffer


def stored_as_bytes(directory: Path, name: str) -> str:
    return (
        f"{Path(directory) / METADATA_FILE}: entry '{name}' is not stored as a tensor, which "
        "it must be (a model's weight, an optimizer's state); the checkpoint is not loaded"
    )


def load_as_data(state: dict[str, Any], directory: Path, no_dist: bool = False) -> None:
    """`dcp.load` of the checkpoint in `directory` into `state`, its metadata and its entries
    read as data; collective unless `no_dist`. A refused or unreadable entry is one
    CheckpointError, on every rank (DCP wraps each rank's failure into an exception that
    prints every rank's traceback, and gives it to every rank)."""
    import torch.distributed.checkpoint as dcp

    reader = DataReader(directory)
    try:
        with single_process_quietly():
            dcp.load(state, storage_reader=reader, planner=DataPlanner(directory), no_dist=no_dist)
    except CheckpointException as e:
        refused = [error for error, _ in e.failures.values() if isinstance(error, CheckpointError)]
        if refused:
            raise refused[0] from None
        raise


def check_entries(directory: Path, tensors_only: bool = False) -> Metadata:
    """The metadata of the DCP checkpoint in `directory`, once every entry it stores as bytes
    has been read as data, in this process alone; a CheckpointError naming the file otherwise.

    :param tensors_only: a model's weights, of which no entry may be bytes.
    """
    metadata = read_metadata(directory)
    blobs = []
    for name, entry in metadata.state_dict_metadata.items():
        if isinstance(entry, BytesStorageMetadata) and not tensors_only:
            blobs.append(name)
        elif not isinstance(entry, TensorStorageMetadata):
            raise CheckpointError(stored_as_bytes(directory, name))
    if blobs:
        load_as_data(dict.fromkeys(blobs), directory, no_dist=True)
    return metadata


def whole_state(directory: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a DCP checkpoint of a model's weights, whole, on the CPU, in this
    process alone."""
    metadata = check_entries(directory, tensors_only=True)
    entries = cast(dict[str, TensorStorageMetadata], metadata.state_dict_metadata)  # tensors_only
    state: dict[str, torch.Tensor] = {
        name: torch.empty(entry.size, dtype=entry.properties.dtype)
        for name, entry in entries.items()
    }
    load_as_data(state, directory, no_dist=True)
    return state
