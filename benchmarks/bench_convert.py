"""Converting Zarr v2 to v3: ``zarrx.convert`` against the peers' ways of doing it.

The source is a Zarr v2 array written by zarr-python (blosc lz4, as zarr-python 2 wrote by
default), in a local directory. Each case is timed as the median of ``--repeat`` runs, into a
fresh destination each time, with dask's threaded scheduler:

* **copy, same chunks**: ``zarrx.convert(src, dst)`` vs ``dask.array.from_zarr(src).to_zarr(dst)``
  on zarr-python (zarr_format=3), which is how one copies v2 to v3 with the peers;
* **copy, re-chunked and sharded**: ``zarrx.convert(src, dst, chunks=..., shards=...)`` vs
  ``dask.array.from_zarr(src).rechunk(shards).to_zarr(dst, zarr_array_kwargs=chunks+shards)``;
* **resume of a finished copy**: an interrupted convert whose chunks are all stored: the rerun
  decodes every stored object and writes only the metadata (the worst case of verification);
* **migrate in place**: ``zarrx.migrate_v2_to_v3`` vs ``zarr migrate v3`` (zarr-python's CLI,
  in-process), metadata only.

Run::

    python benchmarks/bench_convert.py            # the full sizes (about a minute)
    python benchmarks/bench_convert.py --smoke    # tiny sizes, a few seconds
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass

import dask
import dask.array as da
import numcodecs
import numpy as np
import zarr

import zarrx
from bench_dask import median_time, sample_data  # the same timing and data as the dask benchmark
from zarrx.errors import StoreError
from zarrx.storage import LocalStore
from zarrx.testing import FaultyStore


@dataclass(frozen=True)
class Sizes:
    shape: tuple[int, int]
    chunks: tuple[int, int]
    new_chunks: tuple[int, int]
    shards: tuple[int, int]
    groups: int  # arrays for the migration case
    repeat: int


FULL = Sizes(shape=(4096, 4096), chunks=(256, 256), new_chunks=(512, 512), shards=(2048, 2048), groups=200, repeat=3)
SMOKE = Sizes(shape=(256, 256), chunks=(64, 64), new_chunks=(64, 64), shards=(128, 128), groups=5, repeat=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to check the script runs")
    parser.add_argument("--repeat", type=int, help="runs per timing (median)")
    args = parser.parse_args()
    sizes = SMOKE if args.smoke else FULL
    repeat = args.repeat or sizes.repeat
    warnings.simplefilter("ignore")
    root = tempfile.mkdtemp(prefix="bench-convert-")
    src, dst = os.path.join(root, "src.zarr"), os.path.join(root, "dst.zarr")
    data = sample_data(sizes.shape)
    source = zarr.create_array(src, shape=data.shape, chunks=sizes.chunks, dtype=data.dtype, zarr_format=2,
                               compressors=numcodecs.Blosc(cname="lz4"), fill_value=0)  # fmt: skip
    source[...] = data

    def fresh() -> None:
        shutil.rmtree(dst, ignore_errors=True)

    def peer_copy(chunks: tuple[int, int] | None = None, shards: tuple[int, int] | None = None) -> None:
        x = da.from_zarr(src)
        kwargs = {"zarr_format": 3}
        if shards is not None:
            x = x.rechunk(shards)
            kwargs = {"zarr_format": 3, "zarr_array_kwargs": {"chunks": chunks, "shards": shards}}
        try:
            x.to_zarr(dst, **kwargs)
        except TypeError:  # dask versions without zarr_array_kwargs
            x.to_zarr(dst, zarr_format=3, chunks=chunks, shards=shards)

    def same_values() -> None:  # every library's result holds the source's values
        if not np.array_equal(zarr.open_array(dst, mode="r")[...], data):
            raise SystemExit(f"{dst} does not hold the source's values")

    rows = []
    with dask.config.set(scheduler="threads"):
        ours = median_time(lambda: zarrx.convert(src, dst, progress=False), repeat, fresh)
        same_values()
        theirs = median_time(peer_copy, repeat, fresh)
        same_values()
        rows.append(("copy, same chunks", ours, theirs, "dask.array.from_zarr(...).to_zarr"))
        sharded = dict(chunks=sizes.new_chunks, shards=sizes.shards)
        ours = median_time(lambda: zarrx.convert(src, dst, progress=False, **sharded), repeat, fresh)
        same_values()
        theirs = median_time(lambda: peer_copy(**sharded), repeat, fresh)
        same_values()
        rows.append(("copy, re-chunked + sharded", ours, theirs, "same, rechunked onto the shards"))
        # an interrupted convert with every chunk stored: its root document failed, its mark is there
        interrupted = os.path.join(root, "interrupted.zarr")
        try:
            zarrx.convert(src, FaultyStore(LocalStore(interrupted), fail_set=lambda key: key == "zarr.json"), progress=False)
        except StoreError:
            pass

        def copy_interrupted() -> None:
            fresh()
            shutil.copytree(interrupted, dst)

        ours = median_time(lambda: zarrx.convert(src, dst, progress=False), repeat, copy_interrupted)
        same_values()
        rows.append(("resume of a finished copy", ours, None, "(no peer resumes)"))

    tree = os.path.join(root, "tree.zarr")
    group = zarr.open_group(tree, mode="w", zarr_format=2)
    for index in range(sizes.groups):
        group.create_array(f"g{index % 10}/a{index}", shape=(100, 100), chunks=(10, 10), dtype="f4",
                           compressors=numcodecs.Blosc(cname="lz4"))  # fmt: skip
    copy = os.path.join(root, "tree-copy.zarr")

    def fresh_tree() -> None:
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(tree, copy)

    def zarr_migrate() -> None:
        from zarr.metadata.migrate_v3 import migrate_v2_to_v3
        from zarr.storage import LocalStore as ZarrLocalStore

        migrate_v2_to_v3(input_store=ZarrLocalStore(copy))

    ours = median_time(lambda: zarrx.migrate_v2_to_v3(copy), repeat, fresh_tree)
    try:
        theirs = median_time(zarr_migrate, repeat, fresh_tree)
    except ImportError:
        theirs = None
    rows.append((f"migrate in place ({sizes.groups} arrays)", ours, theirs, "zarr migrate v3"))

    megabytes = data.nbytes / 2**20
    print(f"v2 -> v3 of a {sizes.shape} float32 array ({megabytes:.0f} MiB, chunks {sizes.chunks}), "
          f"median of {repeat}, threads")  # fmt: skip
    print(f"{'case':36} {'zarrx':>9} {'peer':>9} {'ratio':>7}  peer")
    for name, ours, theirs, peer in rows:
        ratio = f"{theirs / ours:6.2f}x" if theirs else "      -"
        peer_time = f"{theirs:8.3f}s" if theirs else "        -"
        print(f"{name:36} {ours:8.3f}s {peer_time} {ratio}  {peer}")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
