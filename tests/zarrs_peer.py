"""zarrs, the Rust implementation, as a test peer.

zarrs-python runs zarrs (the Rust crate) behind zarr-python; its Rust core takes an array's
``zarr.json`` alone and reads or writes chunks through zarrs' own data types, codecs and chunk
grids. Driving that core directly (``CodecPipelineImpl``) checks zarrx against zarrs for what
zarr-python does not know -- bfloat16, float8, int4, packbits, reshape, rectilinear grids --
without zarr-python in between. Elements cross as raw bytes (NumPy ``V<n>``, ``n`` the stored
bytes per element): zarrs copies them as its data type lays them out.

The chunk grid and key encoding are expanded here from the JSON, independently of zarrx.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
from zarr.storage import LocalStore
from zarrs._internal import ChunkItem, CodecPipelineImpl


def _edges(entry: Any, length: int) -> list[int]:
    """The chunk edge lengths of one dimension of a rectilinear grid (run-length pairs expanded)."""
    if isinstance(entry, int):
        return [entry] * max(1, -(-length // entry))
    edges: list[int] = []
    for item in entry:
        edges.extend([item[0]] * item[1] if isinstance(item, list) else [item])
    return edges


def chunk_edges(metadata: dict[str, Any]) -> list[list[int]]:
    """Every chunk's edge length per dimension (the chunks that hold array elements)."""
    grid, shape = metadata["chunk_grid"], metadata["shape"]
    if grid["name"] == "regular":
        entries: list[Any] = grid["configuration"]["chunk_shape"]
    else:
        entries = grid["configuration"]["chunk_shapes"]
    result = []
    for entry, length in zip(entries, shape):
        edges, total = [], 0
        for edge in _edges(entry, length):
            if total >= length and edges:
                break
            edges.append(edge)
            total += edge
        result.append(edges)
    return result


def _key(metadata: dict[str, Any], coords: tuple[int, ...]) -> str:
    encoding = metadata.get("chunk_key_encoding", {"name": "default"})
    separator = encoding.get("configuration", {}).get("separator")
    if encoding["name"] == "v2":
        return (separator or ".").join(map(str, coords)) if coords else "0"
    return (separator or "/").join(["c", *map(str, coords)])


def _items(metadata: dict[str, Any]) -> list[ChunkItem]:
    shape = tuple(metadata["shape"])
    edges = chunk_edges(metadata)
    items = []
    for coords in itertools.product(*(range(len(e)) for e in edges)):
        starts = [sum(e[:c]) for e, c in zip(edges, coords)]
        sizes = [e[c] for e, c in zip(edges, coords)]
        inside = [min(size, length - start) for size, start, length in zip(sizes, starts, shape)]
        if any(n <= 0 for n in inside):
            continue
        items.append(ChunkItem(
            _key(metadata, coords), [slice(0, n, 1) for n in inside], sizes,
            [slice(start, start + n, 1) for start, n in zip(starts, inside)], list(shape),
        ))  # fmt: skip
    return items


def _pipeline(path: Path, metadata: dict[str, Any]) -> CodecPipelineImpl:
    return CodecPipelineImpl(json.dumps(metadata), store_config=LocalStore(str(path)))


def zarrs_read(path: Path, item_size: int) -> np.ndarray:
    """The whole array at ``path`` as zarrs reads it: raw elements of ``item_size`` bytes."""
    metadata = json.loads((Path(path) / "zarr.json").read_text())
    out = np.zeros(tuple(metadata["shape"]), dtype=f"V{item_size}")
    _pipeline(path, metadata).retrieve_chunks_and_apply_index(_items(metadata), out)
    return out


def zarrs_write(path: Path, metadata: dict[str, Any], values: np.ndarray) -> None:
    """Create the array at ``path`` with ``metadata`` and write ``values`` (its raw elements) with zarrs."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    document = {"zarr_format": 3, "node_type": "array", "attributes": {}, **metadata}
    (path / "zarr.json").write_text(json.dumps(document))
    raw = np.ascontiguousarray(values)
    raw = raw.view(f"V{raw.dtype.itemsize}")
    _pipeline(path, document).store_chunks_with_indices(_items(document), raw, True)
