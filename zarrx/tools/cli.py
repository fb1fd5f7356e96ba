"""The ``zarrx`` command line.

Every command takes a path or any fsspec URL (``file://``, ``s3://``, ``https://``,
``memory://``, ...) and repeated ``--storage-option KEY=VALUE`` (the value parsed as JSON
when it is JSON -- ``anon=true``, ``block_size=0`` -- else kept as text), passed to fsspec.

``zarrx tree URL``
    The hierarchy, one node per line: shapes, data types, chunks, shards and codecs.
``zarrx info URL [--path NODE]``
    One node in detail (:func:`zarrx.tools.display.info_text`): codecs, fill value, dimension
    names, attributes, stored bytes, compression ratio, chunks initialized.
``zarrx verify URL``
    Decode every stored chunk in parallel with a progress bar (:func:`zarrx.verify`), list
    the corrupt, truncated and checksum-failing chunks by key and the missing ones; exit
    status 1 when a chunk or metadata document is bad, or the node is an unfinished convert
    (``--require-all-chunks``: or a chunk is missing, said array by array).
``zarrx consolidate URL``
    Write consolidated metadata (:func:`zarrx.consolidate_metadata`).
``zarrx convert SRC DST``
    Copy a Zarr v2, 2022-draft or v3 hierarchy to Zarr v3 (:func:`zarrx.convert`),
    optionally re-chunking (``--chunks 100,100``), sharding (``--shards``) and
    re-compressing (``--compressor zstd:5``); ``--migrate-in-place`` writes v3 metadata
    beside v2 metadata and keeps the chunks (:func:`zarrx.migrate_v2_to_v3`). Running it
    again after an interruption resumes it; ``--overwrite`` starts over.
``zarrx demo [DIR]``
    Write a synthetic weather dataset (time x lat x lon, CF attributes, sharded) with
    xarray, open it lazily with ``engine="zarrx"``, reduce it in parallel with dask and
    print the tree and a result table: the whole system in one command.

Mistakes (a missing path, not a Zarr store, a node that is not there, a bad option) are
reported on one line on stderr, without a traceback, with exit status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import time
import warnings
from importlib.metadata import version
from typing import Any, Callable, Iterator, Sequence

from zarrx.codecs.normalize import as_codecs, codec_from_name, with_level
from zarrx.errors import NodeNotFoundError, UsageError, ZarrxError
from zarrx.nodes.api import consolidate_metadata, open as open_any
from zarrx.nodes.array import Array
from zarrx.nodes.group import Group
from zarrx.tools import display
from zarrx.storage import make_store
from zarrx.tools.conversion import convert, migrate_v2_to_v3
from zarrx.tools.convert_job import read_job
from zarrx.tools.demo import run_demo
from zarrx.tools.progress import ProgressBar
from zarrx.tools.verify import VerifyReport, verify

__all__ = ["main"]

#: exit statuses: a check found a problem (verify), a mistake or an error stopped the command
EXIT_PROBLEMS = 1
EXIT_ERROR = 2
_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")


# -- opening what the user named ------------------------------------------------------------------
def check_location(url: str) -> None:
    """A local path (or ``file://`` URL) that does not exist is a mistake worth naming as such."""
    scheme = _URL.match(url)
    if (scheme and scheme[1].lower() != "file") or "::" in url:
        return
    local = url[len("file://") :] if scheme else url
    if not os.path.exists(os.path.expanduser(local)):
        raise UsageError(f"{url}: no such file or directory")


@contextlib.contextmanager
def store_expected(url: str, path: str) -> Iterator[None]:
    """Nothing at the root of ``url`` means it is not a Zarr store: say so."""
    try:
        yield
    except NodeNotFoundError as error:
        if path.strip("/"):
            raise
        raise NodeNotFoundError(f"{url} is not a Zarr store: {error}") from None


def open_node(url: str, path: str, storage_options: dict[str, Any] | None) -> Array | Group:
    """The array or group at ``path`` below ``url``, read-only."""
    check_location(url)
    with store_expected(url, path):
        return open_any(url, path, mode="r", storage_options=storage_options)


# -- tree, info, verify, consolidate ----------------------------------------------------------
def run_tree(args: argparse.Namespace) -> int:
    node = open_node(args.url, args.path, parse_storage_options(args.storage_option))
    entry = display.walk(node, max_depth=args.depth, max_children=args.max_children or None)
    print(display.render_tree(entry))
    return EXIT_PROBLEMS if display.errors(entry) else 0


def run_info(args: argparse.Namespace) -> int:
    node = open_node(args.url, args.path, parse_storage_options(args.storage_option))
    print(display.info_text(node, stored=not args.metadata_only))
    return 0


def run_verify(args: argparse.Namespace) -> int:
    options = parse_storage_options(args.storage_option)
    check_location(args.url)
    progress: bool | Callable[[int, int], None] = False if args.no_progress else ProgressBar("verify")
    with store_expected(args.url, args.path):
        report = verify(args.url, args.path, storage_options=options, progress=progress)
    print(report)
    if not report.ok:
        return EXIT_PROBLEMS
    if args.require_all_chunks and report.missing_count:
        print(missing_text(report))
        return EXIT_PROBLEMS
    return 0


def missing_text(report: VerifyReport) -> str:
    """What ``--require-all-chunks`` found missing, array by array, and why that fails the check."""
    missing = [array for array in report.arrays if array.missing]
    lines = [f"FAILED (--require-all-chunks): {report.missing_count} stored object(s) missing in {len(missing)} array(s):"]
    for array in missing:
        example = f", e.g. {array.missing_keys[0]}" if array.missing_keys else ""
        lines.append(f"  /{array.path}: {array.missing} of {array.nchunks} {array.objects} missing{example}")
    lines.append(
        "A missing chunk reads as the array's fill value, which Zarr allows (writers leave out chunks holding "
        "only the fill value), but --require-all-chunks asks for every chunk: a write that was interrupted or "
        "never ran leaves the same gaps, and the fill value read there is not data."
    )
    return "\n".join(lines)


def run_consolidate(args: argparse.Namespace) -> int:
    options = parse_storage_options(args.storage_option)
    check_location(args.url)
    with store_expected(args.url, args.path):
        group = consolidate_metadata(args.url, args.path, storage_options=options)
    nodes = len(group.members(max_depth=None))
    document = ".zmetadata" if group.zarr_format == 2 else "zarr.json"
    print(f"Consolidated the metadata of {nodes} node(s) below {group.name!r} into its {document}")
    return 0


# -- convert ----------------------------------------------------------------------------------

def parse_shape_option(text: str | None, option: str) -> int | tuple[int, ...] | dict[str, int] | None:
    """``"100,100"`` (or ``"100"``, ``"-1,50"``) as ints; ``"time=24,lat=90"`` as lengths by
    dimension name (for hierarchies whose arrays differ in rank)."""
    if text is None:
        return None
    parts = text.split(",")
    try:
        if all("=" in part for part in parts):
            named = (part.split("=", 1) for part in parts)
            return {name.strip(): int(value) for name, value in named}
        values = tuple(int(part) for part in parts)
    except ValueError:
        raise UsageError(
            f"{option}: expected comma-separated integers such as 100,100, or lengths by dimension name "
            f"such as time=24,lat=90, found {text!r}"
        ) from None
    return values[0] if len(values) == 1 else values


def parse_compressor_option(text: str) -> Any:
    """``keep``, ``auto``, ``none``, ``NAME[:LEVEL]`` (any codec name, ``zstd:5``, ``blosc:9``,
    ``zlib``) or codecs as JSON, as the codecs :func:`zarrx.convert` takes; a mistake is refused
    here, before anything is read or written."""
    if text in ("keep", "auto"):
        return text
    if text == "none":
        return None
    if text.lstrip().startswith(("{", "[")):
        try:
            return list(as_codecs(json.loads(text), "--compressor"))
        except ValueError as error:
            if isinstance(error, ZarrxError):
                raise
            raise UsageError(f"--compressor: not valid JSON ({error}): {text!r}") from None
    name, _, level = text.partition(":")
    codec = codec_from_name(name, "--compressor")
    if level:
        try:
            codec = with_level(codec, int(level), "--compressor")
        except ValueError as error:
            if isinstance(error, ZarrxError):
                raise
            raise UsageError(f"--compressor: the level of {name} is an integer, found {level!r}") from None
    return [codec]


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


@contextlib.contextmanager
def warnings_on_stderr() -> Iterator[None]:
    """Warnings (a v2 mask xarray cannot keep in v3, ...) as one ``zarrx: warning:`` line each."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            for warning in caught:
                print(f"zarrx: warning: {_one_line(warning.message)}", file=sys.stderr)


def run_convert(args: argparse.Namespace) -> int:
    storage_options = parse_storage_options(args.storage_option)
    if args.migrate_in_place:
        if args.dst is not None:
            raise UsageError("--migrate-in-place rewrites SRC itself; give no DST")
        if args.chunks or args.shards or args.compressor != "keep" or args.consolidate is not None:
            raise UsageError(
                "--migrate-in-place keeps the chunks as stored; --chunks, --shards, --compressor and --consolidate "
                "need a copy (give DST)"
            )
        with warnings_on_stderr():
            node = migrate_v2_to_v3(args.src, args.path, storage_options=storage_options)
        print(f"Migrated {args.src} in place: Zarr v3 metadata written beside the v2 metadata")
        print(display.tree_text(node))
        return 0
    if args.dst is None:
        raise UsageError("convert needs SRC and DST (or --migrate-in-place to rewrite SRC's metadata)")
    dst_options = parse_storage_options(args.dst_storage_option) or storage_options
    options = dict(
        path=args.path,
        chunks=parse_shape_option(args.chunks, "--chunks"),
        shards=parse_shape_option(args.shards, "--shards"),
        compressors=parse_compressor_option(args.compressor),
        consolidate=args.consolidate,
    )
    resuming = not args.overwrite and read_job(make_store(args.dst, mode="r", storage_options=dst_options)) is not None
    started = time.perf_counter()
    with warnings_on_stderr():
        node = convert(args.src, args.dst, **options, storage_options=storage_options, dst_storage_options=dst_options,
                       overwrite=args.overwrite, progress=not args.no_progress)  # fmt: skip
    consolidated = " (consolidated)" if isinstance(node, Group) and node.is_consolidated else ""
    if resuming:
        print(f"Resumed the interrupted convert into {args.dst}: the stored chunks that decode were kept")
    print(f"Converted {args.src} to Zarr v3 at {args.dst}{consolidated} in {time.perf_counter() - started:.2f} s")
    print(display.tree_text(node))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="zarrx",
        description="Zarr v3 for the dask/xarray world. Every URL may be a path or any fsspec URL "
        "(file://, s3://, https://, memory://, ...).",
    )
    parser.add_argument("--version", action="version", version=f"zarrx {version('zarrx')}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    location = argparse.ArgumentParser(add_help=False)
    location.add_argument("url", metavar="URL", help="a path or fsspec URL of a Zarr hierarchy")
    location.add_argument("--path", default="", help="the node inside URL (default: the root)")
    location.add_argument("--storage-option", action="append", metavar="KEY=VALUE",
                          help="fsspec option, repeatable; the value is parsed as JSON when it can be (anon=true)")  # fmt: skip

    tree = commands.add_parser("tree", parents=[location], help="the hierarchy: shapes, dtypes, chunks, shards, codecs")
    tree.add_argument("--depth", type=int, help="levels of groups to show (default: all)")
    tree.add_argument("--max-children", type=int, default=0, metavar="N",
                      help="members shown per group, the rest counted (default: all)")  # fmt: skip
    info = commands.add_parser("info", parents=[location],
                               help="one node in detail: codecs, fill value, attributes, stored bytes, ratio")  # fmt: skip
    info.add_argument("--metadata-only", action="store_true",
                      help="read the metadata only (no listing of the stored chunks)")  # fmt: skip
    verify = commands.add_parser(
        "verify", parents=[location],
        help="decode every stored chunk; report corrupt and missing ones (exit status 1 if any is bad)",
    )  # fmt: skip
    verify.add_argument("--no-progress", action="store_true", help="no progress bar")
    verify.add_argument("--require-all-chunks", action="store_true",
                        help="missing chunks fail too (by default they read as the fill value, which is legal)")  # fmt: skip
    commands.add_parser("consolidate", parents=[location],
                        help="write consolidated metadata, so the hierarchy opens in one read")  # fmt: skip

    convert = commands.add_parser(
        "convert",
        help="copy a Zarr v2, 2022-draft or v3 hierarchy to Zarr v3 (or migrate v2 metadata in place)",
        description="Copy SRC (Zarr v2, the 2022 draft layout or v3) to DST as Zarr v3, in parallel, "
        "keeping values, attributes and dimension names.",
    )
    convert.add_argument("src", help="source path or URL")
    convert.add_argument("dst", nargs="?", help="destination path or URL (a new Zarr v3 hierarchy)")
    convert.add_argument("--path", default="", help="the node of SRC to convert (default: the root)")
    convert.add_argument("--chunks", help="new chunk shape, e.g. 100,100 or by dimension name time=24,lat=90 "
                         "(-1: a whole axis; default: keep)")  # fmt: skip
    convert.add_argument("--shards", help="shard shape, a multiple of the chunks, e.g. 1000,1000 or time=240")
    convert.add_argument(
        "--compressor", default="keep",
        help="keep (default), auto, none, a codec name with an optional level (zstd:5, gzip:9, blosc:9, lz4, zlib:3) "
        "or a codec list as JSON",
    )  # fmt: skip
    convert.add_argument("--consolidate", action=argparse.BooleanOptionalAction, default=None,
                         help="consolidate DST's metadata (default: when SRC's is)")  # fmt: skip
    convert.add_argument("--storage-option", action="append", metavar="KEY=VALUE",
                         help="fsspec option for SRC (and DST), repeatable; values are JSON or text")  # fmt: skip
    convert.add_argument("--dst-storage-option", action="append", metavar="KEY=VALUE", help="fsspec option for DST only")
    convert.add_argument("--overwrite", action="store_true",
                         help="replace what DST holds (also an interrupted convert into DST, which a rerun resumes)")  # fmt: skip
    convert.add_argument("--no-progress", action="store_true", help="no progress bar")
    convert.add_argument(
        "--migrate-in-place", action="store_true",
        help="write Zarr v3 metadata beside SRC's v2 metadata, keeping its chunks (no DST)",
    )  # fmt: skip

    demo = commands.add_parser(
        "demo", help="write a sample weather dataset, open it with xarray, reduce it with dask, summarise it"
    )
    demo.add_argument("directory", nargs="?", help="where to write weather.zarr (default: a new temporary folder)")
    return parser


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "tree": run_tree,
    "info": run_info,
    "verify": run_verify,
    "consolidate": run_consolidate,
    "convert": run_convert,
    "demo": lambda args: run_demo(args.directory),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 fine, 1 problems found, 2 an error)."""
    args = build_parser().parse_args(argv)
    for stream in (sys.stdout, sys.stderr):  # trees and tables draw with non-ASCII characters
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")
    try:
        return COMMANDS[args.command](args)
    except BrokenPipeError:  # `zarrx tree URL | head`: the reader has seen enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except ZarrxError as error:
        print(f"zarrx: error: {_one_line(error)}", file=sys.stderr)
    except (OSError, ValueError, TypeError, ImportError) as error:
        # file systems and fsspec: unknown protocol, bad or unknown option, missing driver package
        print(f"zarrx: error: {type(error).__name__}: {_one_line(error)}", file=sys.stderr)
    except KeyboardInterrupt:
        print("zarrx: interrupted", file=sys.stderr)
        return 130
    return EXIT_ERROR


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


if __name__ == "__main__":
    sys.exit(main())
