"""The ``zarrx`` command line.

``zarrx demo [DIR]`` writes a small synthetic weather hierarchy (time x lat x
lon, CF-style attributes, dimension names) with zarrx, reads it back from disk
and prints the tree and a short summary, so a newcomer sees the whole path --
create, chunk, encode, store, open, decode -- work in one command.

``zarrx convert SRC DST`` copies a Zarr v2, 2022-draft or v3 hierarchy to Zarr v3
(:func:`zarrx.convert`), optionally re-chunking (``--chunks 100,100``), sharding
(``--shards``) and re-compressing (``--compressor zstd:5``); ``zarrx convert SRC
--migrate-in-place`` writes v3 metadata beside v2 metadata and keeps the chunks
(:func:`zarrx.migrate_v2_to_v3`). Mistakes are reported on one line, without a
traceback, and exit with status 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

import zarrx
from zarrx.errors import UsageError, ZarrxError

__all__ = ["main"]


def write_demo_dataset(path: str) -> zarrx.Group:
    """A year of daily synthetic 2 m temperature and precipitation on a 1° grid."""
    rng = np.random.default_rng(42)
    ntime, nlat, nlon = 365, 181, 360
    lat = np.linspace(-90, 90, nlat)
    lon = np.arange(nlon, dtype="float64")
    days = np.arange(ntime)
    seasonal = 15 * np.cos(2 * np.pi * (days - 200) / 365)[:, None, None] * np.sign(lat)[None, :, None]
    base = 288 - 40 * np.abs(np.sin(np.deg2rad(lat)))[None, :, None]
    t2m = (base + seasonal + rng.normal(0, 2, (ntime, nlat, nlon))).astype("float32")
    precip = rng.gamma(0.5, 2.0, (ntime, nlat, nlon)).astype("float32")

    root = zarrx.create_group(path, overwrite=True, attributes={"title": "zarrx demo: synthetic daily weather", "Conventions": "CF-1.8"})
    dims = ["time", "lat", "lon"]
    coords = {
        "time": (days, {"units": "days since 2024-01-01", "calendar": "standard"}),
        "lat": (lat, {"units": "degrees_north", "standard_name": "latitude"}),
        "lon": (lon, {"units": "degrees_east", "standard_name": "longitude"}),
    }
    for name, (values, attrs) in coords.items():
        coord = root.create_array(name, shape=values.shape, dtype=values.dtype, dimension_names=[name], attributes=attrs)
        coord[...] = values
    variables = {
        "t2m": (t2m, {"units": "K", "long_name": "2 metre temperature"}),
        "precip": (precip, {"units": "mm day-1", "long_name": "total precipitation"}),
    }
    for name, (values, attrs) in variables.items():
        variable = root.create_array(
            name, shape=values.shape, chunks=(73, 91, 90), dtype=values.dtype,
            dimension_names=dims, attributes=attrs, fill_value=np.nan,
        )  # fmt: skip
        variable[...] = values
    zarrx.consolidate_metadata(path)
    return root


def run_demo(directory: str | None) -> int:
    folder = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="zarrx-demo-"))
    path = str(folder / "weather.zarr")
    started = time.perf_counter()
    write_demo_dataset(path)
    written = time.perf_counter() - started
    root = zarrx.open_group(path, mode="r")
    print(f"Wrote {path} in {written:.2f} s\n")
    print(root.tree())
    t2m = root["t2m"]
    print()
    print(t2m.info_complete())
    started = time.perf_counter()
    data = t2m[...]
    read = time.perf_counter() - started
    lat = root["lat"][...]
    print(f"\nRead t2m ({data.nbytes / 2**20:.1f} MiB) in {read:.2f} s")
    print("\nZonal-mean 2 m temperature (K), annual mean:")
    print(f"{'latitude':>10} {'t2m':>8}")
    zonal = data.mean(axis=(0, 2))
    for index in range(0, len(lat), 30):
        print(f"{lat[index]:>10.0f} {zonal[index]:>8.2f}")
    return 0


# -- convert ----------------------------------------------------------------------------------

#: --compressor NAME[:LEVEL] -> the codec JSON (``None``: the level member's name)
_COMPRESSORS = {"zstd": "level", "gzip": "level", "blosc": "clevel"}


def parse_shape_option(text: str | None, option: str) -> tuple[int, ...] | None:
    """``"100,100"`` (or ``"100"``, ``"-1,50"``) as a tuple of ints."""
    if text is None:
        return None
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise UsageError(f"{option}: expected comma-separated integers such as 100,100, found {text!r}") from None
    return values[0] if len(values) == 1 else values  # type: ignore[return-value]


def parse_compressor_option(text: str) -> Any:
    """``keep``, ``auto``, ``none``, ``zstd[:LEVEL]``, ``gzip[:LEVEL]``, ``blosc[:CLEVEL]`` or codec JSON."""
    if text in ("keep", "auto"):
        return text
    if text == "none":
        return None
    if text.lstrip().startswith(("{", "[")):
        try:
            return json.loads(text)
        except ValueError as error:
            raise UsageError(f"--compressor: not valid JSON ({error}): {text!r}") from None
    name, _, level = text.partition(":")
    if name not in _COMPRESSORS:
        raise UsageError(
            f"--compressor: expected keep, auto, none, {', '.join(f'{n}[:LEVEL]' for n in _COMPRESSORS)} "
            f"or a codec's JSON, found {text!r}"
        )
    configuration: dict[str, Any] = {}
    if name == "blosc":
        configuration = {"cname": "zstd", "clevel": 5, "shuffle": "shuffle"}
    elif name == "zstd":
        configuration = {"level": 0}
    else:
        configuration = {"level": 5}
    if level:
        try:
            configuration[_COMPRESSORS[name]] = int(level)
        except ValueError:
            raise UsageError(f"--compressor: the level of {name} is an integer, found {level!r}") from None
    return [{"name": name, "configuration": configuration}]


def parse_storage_options(items: Sequence[str] | None) -> dict[str, Any] | None:
    """``key=value`` pairs; values are JSON when they parse as JSON (true, 3, {...}), else strings."""
    if not items:
        return None
    options: dict[str, Any] = {}
    for item in items:
        key, separator, value = item.partition("=")
        if not separator or not key:
            raise UsageError(f"--storage-option: expected key=value, found {item!r}")
        try:
            options[key] = json.loads(value)
        except ValueError:
            options[key] = value
    return options


def run_convert(args: argparse.Namespace) -> int:
    storage_options = parse_storage_options(args.storage_option)
    if args.migrate_in_place:
        if args.dst is not None:
            raise UsageError("--migrate-in-place rewrites SRC itself; give no DST")
        if args.chunks or args.shards or args.compressor != "keep":
            raise UsageError(
                "--migrate-in-place keeps the chunks as stored; --chunks, --shards and --compressor need a copy (give DST)"
            )
        node = zarrx.migrate_v2_to_v3(args.src, args.path, storage_options=storage_options)
        print(f"Migrated {args.src} in place: Zarr v3 metadata written beside the v2 metadata")
        print(node.tree() if isinstance(node, zarrx.Group) else repr(node))
        return 0
    if args.dst is None:
        raise UsageError("convert needs SRC and DST (or --migrate-in-place to rewrite SRC's metadata)")
    started = time.perf_counter()
    node = zarrx.convert(
        args.src,
        args.dst,
        path=args.path,
        chunks=parse_shape_option(args.chunks, "--chunks"),
        shards=parse_shape_option(args.shards, "--shards"),
        compressors=parse_compressor_option(args.compressor),
        storage_options=storage_options,
        dst_storage_options=parse_storage_options(args.dst_storage_option),
        overwrite=args.overwrite,
        progress=not args.no_progress,
    )
    print(f"Converted {args.src} to Zarr v3 at {args.dst} in {time.perf_counter() - started:.2f} s")
    print(node.tree() if isinstance(node, zarrx.Group) else repr(node))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="zarrx", description="Zarr v3 for the dask/xarray world.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="write a sample dataset, read it back and summarise it")
    demo.add_argument("directory", nargs="?", help="where to write weather.zarr (default: a new temporary folder)")
    convert = commands.add_parser(
        "convert",
        help="copy a Zarr v2, 2022-draft or v3 hierarchy to Zarr v3 (or migrate v2 metadata in place)",
        description="Copy SRC (Zarr v2, the 2022 draft layout or v3) to DST as Zarr v3, in parallel, "
        "keeping values, attributes and dimension names.",
    )
    convert.add_argument("src", help="source path or URL")
    convert.add_argument("dst", nargs="?", help="destination path or URL (a new Zarr v3 hierarchy)")
    convert.add_argument("--path", default="", help="the node of SRC to convert (default: the root)")
    convert.add_argument("--chunks", help="new chunk shape, e.g. 100,100 (-1: a whole axis; default: keep)")
    convert.add_argument("--shards", help="shard shape, a multiple of the chunks, e.g. 1000,1000")
    convert.add_argument(
        "--compressor", default="keep",
        help="keep (default), auto, none, zstd[:LEVEL], gzip[:LEVEL], blosc[:CLEVEL] or a codec list as JSON",
    )  # fmt: skip
    convert.add_argument("--storage-option", action="append", metavar="KEY=VALUE",
                         help="fsspec option for SRC (and DST), repeatable; values are JSON or text")  # fmt: skip
    convert.add_argument("--dst-storage-option", action="append", metavar="KEY=VALUE", help="fsspec option for DST only")
    convert.add_argument("--overwrite", action="store_true", help="replace what DST holds")
    convert.add_argument("--no-progress", action="store_true", help="no progress bar")
    convert.add_argument(
        "--migrate-in-place", action="store_true",
        help="write Zarr v3 metadata beside SRC's v2 metadata, keeping its chunks (no DST)",
    )  # fmt: skip
    return parser


COMMANDS = {
    "demo": lambda args: run_demo(args.directory),
    "convert": run_convert,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except ZarrxError as error:
        print(f"zarrx: error: {_one_line(error)}", file=sys.stderr)
        return 1
    except (OSError, ValueError, TypeError) as error:  # file systems and fsspec (unknown protocol, bad option)
        print(f"zarrx: error: {type(error).__name__}: {_one_line(error)}", file=sys.stderr)
        return 1


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


if __name__ == "__main__":
    sys.exit(main())
