"""A saved model's directory, checked whole before anything is computed from it.

Every reader of a local model (one device and whole copies through transformers'
`from_pretrained`, FairScale's ranks, FSDP2's rank-wise rows) checks the directory here first:
its `config.json` parses, it holds weights, and each weight file holds what its header promises.
A safetensors file is an 8-byte header length, a JSON header (each tensor's dtype, shape and
byte offsets) and the data (huggingface/safetensors, docs: the format), so a file cut short is
known from its header and its size alone, without reading the weights. A torch `.bin` file is a
zip archive, whose directory at the end is missing when the file is cut, and whose pickle may
only hold tensors and plain data (checked as torch's weights-only reader takes it, with the
tensors mapped, not read). Checking costs a header read per file, so the step graph's checks
run it too (a path that does not exist, a config that does not parse, a directory without
weights: one line before any step runs).

Left unchecked, a cut file read rank-wise gave NaN scores that were cached as a result, and
read by transformers a traceback that named no file.
"""

from __future__ import annotations

import json
import math
import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch
from tango.common.exceptions import ConfigurationError

from .errors import first_line, one_line_error, refusal_reason

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
TORCH_INDEX = "pytorch_model.bin.index.json"
TORCH_SINGLE = "pytorch_model.bin"
WEIGHTS = (SINGLE, INDEX, TORCH_SINGLE, TORCH_INDEX)


@one_line_error
class DamagedModelError(RuntimeError):
    """A model directory whose files do not hold what they promise; the message names the
    file and what is missing."""


class SafetensorsFile:
    """A safetensors file's header, and its tensors' rows read with plain file reads.

    safetensors' own reader maps the whole file: every page a rank touches then counts in its
    resident memory. The data is row-major, so a run of rows is one contiguous range, read
    straight into the shard. The header is checked against the file's size when it is read:
    nothing is read from a file that lacks any byte its header promises."""

    DTYPES = {
        "F64": torch.float64,
        "F32": torch.float32,
        "F16": torch.float16,
        "BF16": torch.bfloat16,
        "I64": torch.int64,
        "I32": torch.int32,
        "I16": torch.int16,
        "I8": torch.int8,
        "U8": torch.uint8,
        "BOOL": torch.bool,
    }

    def __init__(self, path: Path):
        self.path = Path(path)
        size = self.path.stat().st_size
        with open(self.path, "rb") as f:
            length = int.from_bytes(f.read(8), "little")
            if size < 8 or 8 + length > size:
                raise self.damaged(
                    f"cut short: {size} bytes, less than its {8 + length}-byte header"
                )
            try:
                header = json.loads(f.read(length))
            except (ValueError, UnicodeDecodeError) as e:
                raise self.damaged(f"its header is not JSON ({first_line(e)})") from None
        self.data_start = 8 + length
        self.entries = {name: entry for name, entry in header.items() if name != "__metadata__"}
        self.check_sizes(size)

    def damaged(self, what: str) -> DamagedModelError:
        return DamagedModelError(f"{self.path}: {what}; the model cannot be read from it")

    def check_sizes(self, size: int) -> None:
        """Every tensor's bytes agree with its dtype and shape, and lie inside the file."""
        ends = []
        for name, entry in self.entries.items():
            try:
                begin, end = entry["data_offsets"]
                width = torch.empty(0, dtype=self.DTYPES[entry["dtype"]]).element_size()
                expected = math.prod(entry["shape"]) * width
            except (KeyError, TypeError, ValueError):
                raise self.damaged(f"its header's entry for '{name}' is not a tensor's") from None
            if end - begin != expected or begin < 0:
                raise self.damaged(
                    f"its header gives '{name}' {end - begin} bytes, its shape needs {expected}"
                )
            ends.append((self.data_start + end, name))
        needed = max(ends, default=(self.data_start, None))[0]
        if size < needed:
            missing = sorted(name for end, name in ends if end > size)
            raise self.damaged(
                f"cut short: {size} of the {needed} bytes its header promises; "
                f"{len(missing)} of its {len(ends)} tensors are missing or partial "
                f"(the first: '{missing[0]}')"
            )

    def rows(self, name: str) -> int:
        shape = self.entries[name]["shape"]
        return shape[0] if shape else 1

    def read_rows(self, handle: Any, name: str, start: int, stop: int, into: torch.Tensor) -> None:
        """Rows `start:stop` of tensor `name` copied into `into` (its dtype and device)."""
        entry = self.entries[name]
        dtype, shape = self.DTYPES[entry["dtype"]], entry["shape"]
        row_shape = shape[1:] if shape else []
        row_bytes = math.prod(row_shape) * torch.empty(0, dtype=dtype).element_size()
        handle.seek(self.data_start + entry["data_offsets"][0] + start * row_bytes)
        count = stop - start
        if (
            into.device.type == "cpu"
            and into.dtype == dtype
            and into.dim()
            and into.is_contiguous()
        ):
            # An ndarray is a buffer; numpy's stubs say so for Python >= 3.12 only.
            shard = memoryview(into.view(torch.uint8).numpy())  # type: ignore[arg-type]
            read = handle.readinto(shard)  # into the shard
        else:
            data = bytearray(count * row_bytes)
            read = handle.readinto(data)
            into.copy_(torch.frombuffer(data, dtype=dtype).view(into.shape))
        if read != count * row_bytes:  # the file changed since its header was checked
            raise self.damaged(f"'{name}': {read} of {count * row_bytes} bytes read")


def saved_tensors(directory: Path) -> dict[str, SafetensorsFile]:
    """Each saved tensor's name and the safetensors file that holds it (one file, or an
    index's shards), each file's header read once and checked against its size; {} for a
    directory without safetensors weights."""
    directory = Path(directory)
    if (directory / INDEX).is_file():
        index = read_index(directory / INDEX)
        files = {path: SafetensorsFile(path) for path in sorted(set(index.values()))}
        for name, path in index.items():
            if name not in files[path].entries:
                raise files[path].damaged(f"{INDEX} puts '{name}' here, but its header lacks it")
        return {name: files[path] for name, path in index.items()}
    if (directory / SINGLE).is_file():
        single = SafetensorsFile(directory / SINGLE)
        return dict.fromkeys(single.entries, single)
    return {}


def read_index(path: Path) -> dict[str, Path]:
    """A sharded checkpoint's index: each tensor's file, every file named there present."""
    try:
        names = json.loads(path.read_text())["weight_map"]
        files = {name: path.parent / file for name, file in names.items()}
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise DamagedModelError(
            f"{path}: not a weight index ({first_line(e)}); the model cannot be read"
        ) from None
    absent = sorted({f.name for f in files.values() if not f.is_file()})
    if absent:
        raise DamagedModelError(
            f"{path}: names {absent[0]}, which is missing ({len(absent)} of its "
            f"{len(set(files.values()))} files are); the model cannot be read"
        )
    return files


def check_torch_weights(directory: Path) -> None:
    """`pytorch_model.bin` files (zip archives, as torch.save writes them) are whole."""
    if (directory / TORCH_INDEX).is_file():
        paths = sorted(set(read_index(directory / TORCH_INDEX).values()))
    else:
        paths = [directory / TORCH_SINGLE]
    for path in paths:
        size = path.stat().st_size
        try:
            with zipfile.ZipFile(path) as archive:
                end = max(i.header_offset + i.compress_size for i in archive.infolist())
        except (zipfile.BadZipFile, ValueError) as e:
            raise DamagedModelError(
                f"{path}: not a whole torch file ({first_line(e)}: cut short or damaged); the "
                "model cannot be read from it"
            ) from None
        if end > size:
            raise DamagedModelError(
                f"{path}: cut short ({size} of at least {end} bytes); the model cannot be read"
            )
        check_torch_data(path)


def check_torch_data(path: Path) -> None:
    """A whole `.bin` file holds tensors and plain data only, as torch's weights-only reader
    (transformers' too) takes them: read with its storages mapped, not loaded, so that a
    pickled object is refused here, naming the file, whichever engine reads it later."""
    try:
        torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as e:
        raise DamagedModelError(
            f"{path}: holds something other than tensors and plain data, which is not loaded "
            f"({refusal_reason(e).split(' Please use')[0]}); save the model with save_pretrained "
            "(safetensors)"
        ) from None
    except (RuntimeError, OSError, EOFError, ValueError, TypeError) as e:
        raise DamagedModelError(f"{path}: cannot be read as weights ({first_line(e)})") from None


def check_model_directory(path: str, field: str = "model.pretrained", weights: bool = True) -> None:
    """A local model directory as every reader needs it (see the module): one line naming the
    field or the file when it is not. Without `weights`, its config alone (a skeleton built
    from a checkpoint's `model_files/`)."""
    directory = Path(path)
    if not directory.exists():
        raise ConfigurationError(f"{field} '{path}': no such file or directory")
    if not directory.is_dir():
        raise ConfigurationError(f"{field} '{path}': not a directory (a saved model is one)")
    config = directory / "config.json"
    if not config.is_file():
        raise ConfigurationError(f"{field} '{path}': no config.json there (not a saved model)")
    try:
        settings = json.loads(config.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise ConfigurationError(f"{config}: not JSON ({first_line(e)})") from None
    if isinstance(settings, dict) and "auto_map" in settings and not known_type(settings):
        raise needs_remote_code(path, field)
    if not weights:
        return
    if not any((directory / name).is_file() for name in WEIGHTS):
        raise ConfigurationError(
            f"{field} '{path}': no weights there (none of {', '.join(WEIGHTS)})"
        )
    if not saved_tensors(directory):
        check_torch_weights(directory)


def known_type(settings: dict) -> bool:
    """Whether transformers ships the config's model type (else only the files' code has it)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    return settings.get("model_type") in CONFIG_MAPPING


def needs_remote_code(name: str, field: str) -> ConfigurationError:
    return ConfigurationError(
        f"{field} '{name}': needs trust_remote_code (its files name code of their own to run), "
        "and catwalk_steps runs no code from a model's files; use a model whose architecture "
        "transformers ships"
    )
