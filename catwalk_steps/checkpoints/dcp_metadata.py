"""An FSDP2 checkpoint's metadata read as data: DCP's `.metadata` file is a pickle.

torch.distributed.checkpoint describes a checkpoint in a pickled `Metadata` object, which its
`FileSystemReader` unpickles with `pickle.load`: a planted file would run code whatever the
manifest says of it (someone who can rewrite the manifest can write both). Here it is read with
an unpickler that admits only what DCP writes there (checked against torch 2.11 and 2.13): its
metadata dataclasses, torch sizes, dtypes and layouts, and a path. Anything else is refused in
one line naming the file, before any rank loads a tensor.
"""

from __future__ import annotations

import contextlib
import io
import pickle
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.metadata import Metadata

from .layout import CheckpointError

METADATA_FILE = ".metadata"
ALLOWED = {
    "torch.distributed.checkpoint.metadata": {
        "BytesStorageMetadata",
        "ChunkStorageMetadata",
        "Metadata",
        "MetadataIndex",
        "StorageMeta",
        "TensorProperties",
        "TensorStorageMetadata",
        "_MEM_FORMAT_ENCODING",
    },
    "torch.distributed.checkpoint.filesystem": {"_StorageInfo"},
    "torch.serialization": {"_get_layout"},
    "torch": {"Size"},
    "pathlib": {"PosixPath", "PurePosixPath", "Path"},
    "collections": {"OrderedDict"},
}


class _MetadataUnpickler(pickle.Unpickler):
    def __init__(self, data: bytes, path: Path):
        super().__init__(io.BytesIO(data))
        self.path = path

    def find_class(self, module: str, name: str) -> Any:
        if name in ALLOWED.get(module, ()) or (module == "torch" and is_dtype(name)):
            return super().find_class(module, name)
        raise CheckpointError(
            f"{self.path}: names {module}.{name}, which is not part of a checkpoint's metadata; "
            "the file is not loaded (it was not written by torch.distributed.checkpoint)"
        )


def is_dtype(name: str) -> bool:
    return isinstance(getattr(torch, name, None), torch.dtype)


def read_metadata(directory: Path) -> Metadata:
    """The `Metadata` of the DCP checkpoint in `directory`, read as data."""
    path = Path(directory) / METADATA_FILE
    try:
        metadata = _MetadataUnpickler(path.read_bytes(), path).load()
    except CheckpointError:
        raise
    except Exception as e:  # cut short, damaged, not a pickle
        raise CheckpointError(f"{path}: cannot be read ({type(e).__name__}: {e})") from None
    if not isinstance(metadata, Metadata):
        raise CheckpointError(f"{path}: holds a {type(metadata).__name__}, not DCP's Metadata")
    return metadata


class MetadataCheckingReader(FileSystemReader):
    """DCP's file-system reader with the metadata read by :func:`read_metadata`."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        metadata = read_metadata(Path(self.path))
        # What FileSystemReader.read_metadata does after unpickling (torch 2.11, 2.13).
        storage_meta = getattr(metadata, "storage_meta", None)
        if storage_meta is None:
            from torch.distributed.checkpoint.metadata import StorageMeta

            storage_meta = metadata.storage_meta = StorageMeta()
        storage_meta.load_id = self.load_id
        return metadata


@contextlib.contextmanager
def single_process_quietly() -> Iterator[None]:
    """DCP warns on every save and load without a process group that it is "assuming the intent
    is to save in a single process": it is (one device, or `catwalk-export`), and the warning
    reached the terminal each time."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield
