"""Reading GPT-2 safetensors without torch: header checks and zero-copy memory maps.

Names are normalised to the hub's `gpt2` layout: `transformer.` is stripped, the tied
`lm_head.weight` and the old causal-mask buffers (`attn.bias`, `attn.masked_bias`) are dropped.
"""

from __future__ import annotations

import json
import math
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "F64": np.float64}
_SKIPPED_SUFFIXES = (".attn.bias", ".attn.masked_bias")
_LAYER = re.compile(r"h\.(\d+)\.")


class CorruptWeights(ValueError):
    """The safetensors file is truncated, malformed or not what the config describes."""


@dataclass(frozen=True)
class TensorInfo:
    dtype: str
    shape: tuple[int, ...]
    start: int  # absolute byte offset in the file
    end: int


def normalise_name(name: str) -> str | None:
    if name.startswith("transformer."):
        name = name[len("transformer.") :]
    if name == "lm_head.weight" or name.endswith(_SKIPPED_SUFFIXES):
        return None
    return name


def read_header(path: Path) -> dict[str, TensorInfo]:
    """Parse and sanity-check the header; raise CorruptWeights if the file cannot be whole."""
    path = Path(path)
    size = path.stat().st_size
    with path.open("rb") as f:
        raw = f.read(8)
        if len(raw) < 8:
            raise CorruptWeights(f"{path.name} is too short to be a safetensors file")
        (header_len,) = struct.unpack("<Q", raw)
        if header_len <= 0 or 8 + header_len > size or header_len > 100_000_000:
            raise CorruptWeights(f"{path.name} has an invalid safetensors header")
        try:
            header = json.loads(f.read(header_len))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CorruptWeights(f"{path.name} has an unreadable safetensors header: {exc}") from exc
    if not isinstance(header, dict):
        raise CorruptWeights(f"{path.name} has a safetensors header that is not a JSON object")
    base = 8 + header_len
    tensors: dict[str, TensorInfo] = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        info = _tensor_info(path.name, name, meta, base)
        if info.end > size:
            raise CorruptWeights(f"{path.name} is truncated ({size} bytes; tensor {name} ends at {info.end})")
        tensors[name] = info
    return tensors


def _tensor_info(file: str, name: str, meta: object, base: int) -> TensorInfo:
    """One header entry, checked: its byte span must hold exactly its shape (a mismatch would fail
    later, in every engine's reshape)."""
    try:
        begin, end = (int(v) for v in meta["data_offsets"])  # type: ignore[index]
        shape = tuple(int(n) for n in meta["shape"])  # type: ignore[index]
        dtype = str(meta["dtype"])  # type: ignore[index]
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptWeights(f"{file} has a malformed header entry for tensor {name}: {exc!r}") from exc
    if begin < 0 or end < begin or any(n < 0 for n in shape):
        raise CorruptWeights(f"{file}: tensor {name} has a negative size or offset")
    if dtype in _DTYPES:
        needed = math.prod(shape) * np.dtype(_DTYPES[dtype]).itemsize
        if end - begin != needed:
            raise CorruptWeights(f"{file}: tensor {name} spans {end - begin} bytes, its shape {shape} needs {needed}")
    return TensorInfo(dtype, shape, base + begin, base + end)


def normalised_header(path: Path) -> dict[str, TensorInfo]:
    out = {}
    for name, info in read_header(path).items():
        key = normalise_name(name)
        if key is not None:
            out[key] = info
    return out


def check_against_config(path: Path, config: dict) -> None:
    """Every tensor GPT-2 needs is there, with the shape the config implies."""
    from .random_weights import gpt2_shapes

    found = normalised_header(path)
    layers = _layers(found)
    if layers != config["n_layer"]:  # before gpt2_shapes, which builds every layer's names
        raise CorruptWeights(f"{Path(path).name} holds {layers} layers, config.json says n_layer={config['n_layer']}")
    for name, shape in gpt2_shapes(config).items():
        info = found.get(name)
        if info is None:
            raise CorruptWeights(f"{Path(path).name} lacks tensor {name!r}")
        if info.shape != shape:
            raise CorruptWeights(f"tensor {name!r} has shape {info.shape}, the config implies {shape}")
        if info.dtype not in _DTYPES:
            raise CorruptWeights(f"tensor {name!r} has unsupported dtype {info.dtype}")


def _layers(names: Iterable[str]) -> int:
    """How many transformer blocks (h.0., h.1., ...) the tensors describe."""
    indices = {int(match.group(1)) for name in names if (match := _LAYER.match(name))}
    return max(indices) + 1 if indices else 0


def mmap_numpy(path: Path) -> dict[str, np.ndarray]:
    """Zero-copy fp32 views of every tensor (fp16/bf16 are widened, which copies)."""
    buffer = np.memmap(path, dtype=np.uint8, mode="r")
    out: dict[str, np.ndarray] = {}
    for name, info in normalised_header(path).items():
        raw = buffer[info.start : info.end].view(_DTYPES[info.dtype]).reshape(info.shape)
        if info.dtype == "BF16":
            raw = (raw.astype(np.uint32) << 16).view(np.float32)
        elif info.dtype != "F32":
            raw = raw.astype(np.float32)
        out[name] = raw
    return out
