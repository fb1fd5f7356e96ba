"""Copies between arrays that store the same chunks: each decoded and encoded again on its own.

A copy step (:mod:`zarrx.io.copy`, ``zarrx.convert``) reads the source's part of the step into a
block of values, then cuts the destination's chunks out of it and encodes them: every value is
copied twice between the codecs, once into the block and once out of it. When the destination
encodes exactly the source's units -- each inner chunk (or chunk) of the destination is one of the
source's, at the same place -- :func:`transcode_step` skips the block: each source unit is
decoded into the thread's scratch buffer and encoded from there with the destination's codecs,
and the destination's objects are written whole. That is the case of a convert keeping the
chunks (new codecs, a new format), and of putting the chunks of an unsharded array into
shards of them.

:func:`transcodes` says when it applies: regular grids of one shape, one data type (not
objects), one fill value, the same unit shape; a sharded source only into shards of the same
shape (each destination shard then reads one source shard, whole). Units absent from the
source stay absent (the fill value either way), unless the destination writes empty chunks;
units all fill value are left out unless it does. Each destination object is replaced whole:
what it held before is gone, as with any write of the whole object.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from zarrx.codecs.base import ChunkSpec
from zarrx.codecs.pipeline import CodecPipeline
from zarrx.concurrency import call_threads
from zarrx.dtypes.fill import is_all_fill
from zarrx.io.decode import run_maybe_threaded, stored_as_in_memory, worth_threads
from zarrx.io.handle import ArrayHandle
from zarrx.scratch import scratch_array, values_are_bytes
from zarrx.storage.store import bounded_get_many

__all__ = ["transcodes", "transcode_step"]


def _unit(handle: ArrayHandle) -> tuple[tuple[int, ...], CodecPipeline, ChunkSpec]:
    """The shape, codecs and spec of what ``handle`` encodes on its own: inner chunks, or chunks."""
    if handle.sharding is not None:
        return tuple(handle.sharding.chunk_shape), handle.sharding.codecs, handle.inner_spec  # type: ignore[return-value]
    return tuple(handle.metadata.chunks), handle.pipeline, handle.spec


def transcodes(source: ArrayHandle, target: ArrayHandle) -> bool:
    """Whether ``target`` encodes exactly ``source``'s units, so a copy may go unit by unit.

    Examples
    --------
    >>> import zarrx
    >>> src = zarrx.create_array({}, shape=(10, 10), chunks=(2, 5), dtype="i2")
    >>> into = lambda **layout: transcodes(src.handle, zarrx.create_array({}, shape=(10, 10), dtype="i2", **layout).handle)
    >>> into(chunks=(2, 5), compressors="zstd"), into(chunks=(2, 5), shards=(4, 10)), into(chunks=(5, 2))
    (True, True, False)
    """
    if not (source.regular and target.regular) or source.shape != target.shape or source.dtype != target.dtype:
        return False
    if not values_are_bytes(source.dtype):  # decoded into a scratch buffer of bytes
        return False
    if not _same_fill(source, target) or _unit(source)[0] != _unit(target)[0]:
        return False
    if any(stored_as_in_memory(codecs, spec) for _, codecs, spec in (_unit(source), _unit(target))):
        return False  # no codec to copy between: the step's block is read into and written from as it is stored
    # a source shard is read whole: only into a destination shard of its own shape
    return source.sharding is None or (target.sharding is not None and source.metadata.chunks == target.metadata.chunks)


def _same_fill(source: ArrayHandle, target: ArrayHandle) -> bool:
    """Whether both fill values are the same bits (an absent unit means the same values in both)."""
    dtype = source.dtype
    try:
        return np.asarray(source.fill_value, dtype=dtype).tobytes() == np.asarray(target.fill_value, dtype=dtype).tobytes()
    except (TypeError, ValueError, OverflowError):  # a fill value NumPy cannot hold as given: the step-by-step copy
        return False


def transcode_step(source: ArrayHandle, target: ArrayHandle, box: tuple[slice, ...]) -> None:
    """Copy ``box`` (whole objects of ``target``, at the same place in ``source``) unit by unit;
    see the module docstring. The step's source objects come in one ``get_many`` and its
    destination objects go in one ``set_many`` (and one ``delete_many``); where the caller may
    use the pool, a shard's units are encoded on it, or the step's chunks."""
    objects = list(itertools.product(*(
        range(part.start // size, -(-part.stop // size)) for part, size in zip(box, target.metadata.chunks)
    )))  # fmt: skip
    units = {coords: _units(target, coords) for coords in objects}
    stored = _source_units(source, target, units)
    threaded = call_threads() > 1 and worth_threads(_unit(target)[2])
    keys = {coords: target.object_key(coords) for coords in objects}
    if target.sharding is None:  # an object is one unit: the step's objects on the pool
        results = run_maybe_threaded(lambda coords: _object(source, target, keys[coords], stored[coords], False),
                                     objects, threaded, _unit(source)[1])  # fmt: skip
    else:
        results = [_object(source, target, keys[coords], stored[coords], threaded) for coords in objects]
    to_store = {keys[coords]: data for coords, data in zip(objects, results) if data is not None}
    if to_store:
        target.store.set_many(to_store)
    to_delete = [keys[coords] for coords, data in zip(objects, results) if data is None]
    if to_delete:
        target.store.delete_many(to_delete)


def _units(target: ArrayHandle, coords: tuple[int, ...]) -> list[tuple[int, ...]]:
    """The units of ``target``'s object at ``coords`` (coordinates in it) that hold values: those
    wholly past the array's edge are never stored."""
    unit_shape, per_object = _unit(target)[0], target.chunks_per_object
    return [
        inner for inner in itertools.product(*(range(n) for n in per_object))
        if all((c * n + i) * size < length for c, n, i, size, length in zip(coords, per_object, inner, unit_shape, target.shape))
    ]  # fmt: skip


def _object(source: ArrayHandle, target: ArrayHandle, key: str, stored: dict[tuple[int, ...], tuple[Any, str]],
            threaded: bool) -> bytes | None:  # fmt: skip
    """The encoded object ``key`` of ``target`` made of the source units ``stored`` (by their
    coordinates in it: bytes, None when absent, and the name a decoding error gives), None when
    nothing in it is to be stored; its units encoded on the pool when ``threaded``."""
    unit_shape, source_codecs, source_spec = _unit(source)
    _, target_codecs, target_spec = _unit(target)
    keep_empty, fill = target.write_empty_chunks, target.fill_value

    def encode(inner: tuple[int, ...]) -> bytes | None:
        raw, name = stored[inner]
        if raw is None:
            if not keep_empty:
                return None
            chunk = np.full(unit_shape, fill, dtype=target.dtype)
        else:
            chunk = source_codecs.decode(raw, source_spec, key=name, out=scratch_array(unit_shape, source.dtype))
            if not keep_empty and is_all_fill(chunk, fill):
                return None
        return target_codecs.encode(chunk, target_spec, key=key if target.sharding is None else f"{key} inner chunk {inner}")

    units = list(stored)
    results = run_maybe_threaded(encode, units, threaded, source_codecs)
    if target.sharding is None:
        return results[0]
    encoded = {inner: data for inner, data in zip(units, results) if data is not None}
    return target.sharding.assemble(encoded, target.spec) if encoded else None


def _source_units(source: ArrayHandle, target: ArrayHandle, units: dict[tuple[int, ...], list[tuple[int, ...]]]
                  ) -> dict[tuple[int, ...], dict[tuple[int, ...], tuple[Any, str]]]:  # fmt: skip
    """Per destination object (by its coordinates), the stored bytes of the source's units of it
    (None: absent), each with the name its errors give: read in one ``get_many``."""
    if source.sharding is not None:  # each the source shard of the same shape, at the same place, whole
        keys = {coords: source.object_key(coords) for coords in units}
        shards = bounded_get_many(source.store, list(keys.values()), source.max_object_size)
        found = {}
        for coords, key in keys.items():
            shard = shards[key]
            if shard is None:
                found[coords] = {inner: (None, key) for inner in units[coords]}
                continue
            index = source.sharding.read_index(shard, source.spec, key, whole=True)
            found[coords] = {inner: (index.cut(shard, inner), f"{key} inner chunk {inner}") for inner in units[coords]}
        return found
    per_object = target.chunks_per_object
    keys = {
        coords: {inner: source.object_key(tuple(c * n + i for c, n, i in zip(coords, per_object, inner))) for inner in inner_units}
        for coords, inner_units in units.items()
    }  # fmt: skip
    chunks = bounded_get_many(source.store, [key for named in keys.values() for key in named.values()], source.max_object_size)
    return {coords: {inner: (chunks[key], key) for inner, key in named.items()} for coords, named in keys.items()}
