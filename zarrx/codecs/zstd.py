"""The ``zstd`` codec (zarr-extensions codecs/zstd): Zstandard frames (RFC 8878).

The library is ``zstandard`` (python-zstandard, libzstd), with a decompression context per
thread and a compression context per thread and (level, checksum), made once and reused
(:class:`~zarrx.codecs.contexts.ThreadContexts`): numcodecs makes and frees one on every
call, which costs more than decoding a chunk of a few KiB (see docs/performance.md,
"Codec back-ends"). The frames written are standard single frames recording their content
size (and a checksum when ``checksum`` is set); numcodecs, zarr-python, tensorstore and
zarrs read them, and zarrx reads theirs.

Decoding is bounded. The frame header is read first (RFC 8878 section 3.1.1.1):
a declared content size that differs from the expected size, or exceeds
``max_size``, is refused before any decompression; the frame is then decompressed into
exactly that many bytes and must fill them. A frame that does not declare its size is only
decoded when the expected size is known, into a buffer of that size that it must fill
exactly (libzstd stops at the end of the buffer); otherwise it is refused. One frame per
chunk: a truncated frame, a missing checksum or bytes after the frame are errors.

Chunks of 64 KiB and more are decoded in place (``stream_reader.readinto`` with the whole
frame as input: libzstd's one-shot path, checksum included), after the block headers are
walked to check that the input is exactly one whole frame -- the reader alone does not tell
a truncated frame from a finished one. Smaller chunks are decoded by ``decompress`` and
copied: the walk costs more than the copy there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import zstandard

from zarrx.codecs.base import (
    Buffer,
    BytesBytesCodec,
    as_uint8,
    parse_choice,
    parse_int,
    raise_unexpected,
    require_member,
)
from zarrx.codecs.contexts import ThreadContexts
from zarrx.codecs.registry import register_codec
from zarrx.errors import ChunkDecodeError

__all__ = ["ZstdCodec", "frame_content_size"]

_MAGIC = 0xFD2FB528
#: what zstandard.frame_content_size gives for a frame that does not record its size
_UNKNOWN_CONTENT_SIZE = -1
_FCS_FIELD_SIZES = (0, 2, 4, 8)  # by Frame_Content_Size_Flag; 0 means 1 when Single_Segment_Flag is set
_DICT_ID_SIZES = (0, 1, 2, 4)
#: magic (4) + descriptor (1) + window (1) + dictionary id (<= 4) + content size (<= 8)
_MAX_HEADER_SIZE = 18
_BLOCK_HEADER_SIZE, _CHECKSUM_SIZE, _RLE_BLOCK, _RESERVED_BLOCK = 3, 4, 1, 3
#: decoded sizes from which a frame is decoded in place rather than decoded and copied
IN_PLACE_FROM = 64 * 1024
#: decoded sizes below which :meth:`ZstdCodec.decode_where` keeps libzstd's own buffer: below the
#: allocator's threshold for fresh mappings (128 KiB in glibc), so no fresh memory per chunk
OWN_BUFFER_BELOW = 128 * 1024

#: a decompressor per thread (``ZstdDecompressor`` is not thread safe; its DCtx is reused)
_DECOMPRESSORS: ThreadContexts[zstandard.ZstdDecompressor] = ThreadContexts(lambda key: zstandard.ZstdDecompressor())
#: a compressor per thread and (level, checksum); frames always record the content size
_COMPRESSORS: ThreadContexts[zstandard.ZstdCompressor] = ThreadContexts(
    lambda key: zstandard.ZstdCompressor(level=key[0], write_checksum=key[1], write_content_size=True)
)


@register_codec
@dataclass(frozen=True, eq=False)
class ZstdCodec(BytesBytesCodec):
    """Zstandard compression; ``level`` -131072..22 (0 = library default), optional frame ``checksum``.

    Examples
    --------
    >>> ZstdCodec(level=3, checksum=True).to_json()
    {'name': 'zstd', 'configuration': {'level': 3, 'checksum': True}}
    """

    name = "zstd"

    level: int = 0
    checksum: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "level", parse_int(self.name, "level", self.level, -131072, 22))
        object.__setattr__(self, "checksum", bool(parse_choice(self.name, "checksum", self.checksum, (True, False))))

    @classmethod
    def from_json(cls, configuration: Mapping[str, Any]) -> "ZstdCodec":
        raise_unexpected(cls.name, configuration, ("level", "checksum"))
        level = require_member(cls.name, configuration, "level")
        return cls(level=level, checksum=configuration.get("checksum", False))

    def configuration(self) -> dict[str, Any]:
        # the extension's README: "checksum ... should be omitted if false"
        return {"level": self.level, "checksum": True} if self.checksum else {"level": self.level}

    def encode(self, data: Buffer) -> Buffer:
        return _COMPRESSORS.get((self.level, self.checksum)).compress(as_uint8(data))

    decodes_into = True

    def decode(self, data: Buffer, expected_size: int | None, max_size: int) -> Buffer:
        source = data if isinstance(data, bytes) else as_uint8(data)
        content_size = frame_content_size(source)
        if content_size is not None:
            if expected_size is not None and content_size != expected_size:
                raise ChunkDecodeError(f"the frame declares {content_size} decoded bytes, expected {expected_size}")
            if content_size > max_size:
                raise ChunkDecodeError(f"the frame declares {content_size} decoded bytes, over the limit of {max_size}")
            output_size = content_size
        elif expected_size is not None:
            output_size = expected_size
        else:
            raise ChunkDecodeError(
                "the frame does not declare its decoded size and the chunk's size is not known; "
                "refusing an unbounded decompression (rewrite the data with a zstd that records the content size)"
            )
        output = np.empty(output_size, dtype=np.uint8)
        if content_size != 0:  # a frame declaring 0 bytes holds nothing
            _decompress(source, output, content_size is not None)
        return output

    decodes_many = True

    def decode_many(self, frames: Sequence[Buffer], nbytes: int) -> Sequence[Buffer]:
        """Each frame decoded to exactly ``nbytes``, in one ``multi_decompress_to_buffer`` call
        (libzstd, the GIL released for all of them). Each must be one whole frame declaring
        ``nbytes`` (or no size), as :meth:`decode` requires: the headers and block headers are
        checked here first (:func:`_check_frames`), since that call reads a frame's first frame only."""
        if not frames:
            return []
        if set(map(type, frames)) != {bytes}:  # (bytes: cheaper slices)
            frames = [frame if isinstance(frame, bytes) else memoryview(frame).cast("B") for frame in frames]
        _check_frames(frames, nbytes)
        sizes = np.full(len(frames), nbytes, dtype=np.uint64).tobytes()
        try:
            return _DECOMPRESSORS.get().multi_decompress_to_buffer(frames, decompressed_sizes=sizes, threads=1)
        except (zstandard.ZstdError, ValueError) as error:
            raise ChunkDecodeError(f"corrupt zstd data: {error}") from error

    def decode_where(self, data: Buffer, out: np.ndarray) -> Buffer:
        """Below :data:`OWN_BUFFER_BELOW` bytes, the frame decoded by libzstd's one-shot call into
        a buffer of its own (no copy into ``out``); larger, into ``out``, as :meth:`decode_into`."""
        if out.nbytes >= OWN_BUFFER_BELOW:
            self.decode_into(data, out)
            return out
        source, content_size = _declaring(data, out.nbytes)
        return out if content_size == 0 else _decompressed(source, out.nbytes)  # (0: nothing to decode)

    def decode_into(self, data: Buffer, out: np.ndarray) -> None:
        source, content_size = _declaring(data, out.nbytes)
        if content_size != 0:
            _decompress(source, out, content_size is not None)


def _declaring(data: Buffer, nbytes: int) -> tuple[Buffer, int | None]:
    """``data`` as bytes or uint8, and the content size its frame declares (None: none), which
    must be ``nbytes`` when declared."""
    source = data if isinstance(data, bytes) else as_uint8(data)
    content_size = frame_content_size(source)
    if content_size is not None and content_size != nbytes:
        raise ChunkDecodeError(f"the frame declares {content_size} decoded bytes, expected {nbytes}")
    return source, content_size


def _decompress(source: Buffer, output: np.ndarray, sized: bool) -> None:
    """Decode the one frame of ``source`` into ``output``, which it must fill exactly;
    ``sized``: the frame declares ``output.nbytes`` as its content size."""
    if sized and output.nbytes >= IN_PLACE_FROM:
        _decompress_in_place(source, output)
        return
    memoryview(output)[:] = _decompressed(source, output.nbytes)


def _decompressed(source: Buffer, nbytes: int) -> bytes:
    """The one frame of ``source`` decoded by libzstd's one-shot call; it must make ``nbytes``."""
    try:
        # at most nbytes bytes are made (a frame without a size gets a buffer of that many; 0
        # would mean "no limit", hence 1); a longer frame fails ("did not decompress full
        # frame"), and so do a truncated frame and bytes after it
        decoded = _DECOMPRESSORS.get().decompress(source, max_output_size=nbytes or 1, allow_extra_data=False)
    except zstandard.ZstdError as error:
        raise ChunkDecodeError(f"corrupt zstd data: {error}") from error
    if len(decoded) != nbytes:
        raise ChunkDecodeError(f"the frame decodes to {len(decoded)} bytes, expected {nbytes}")
    return decoded


def _decompress_in_place(source: Buffer, output: np.ndarray) -> None:
    view = memoryview(source).cast("B")
    frame_size = _frame_size(view)
    if frame_size != len(view):
        raise ChunkDecodeError(f"corrupt zstd data: the frame takes {frame_size} bytes, the chunk has {len(view)}")
    reader = _DECOMPRESSORS.get().stream_reader(view, read_size=len(view))
    try:
        written, more = reader.readinto(output), reader.read(1)
    except zstandard.ZstdError as error:
        raise ChunkDecodeError(f"corrupt zstd data: {error}") from error
    if written != output.nbytes or more:
        raise ChunkDecodeError(f"the frame decodes to {'more than ' * bool(more)}{written} bytes, expected {output.nbytes}")


def _frame_size(view: memoryview) -> int:
    """The bytes the frame at the start of ``view`` takes: header, blocks, checksum (RFC 8878 3.1.1)."""
    return _frame_extent(view)[0]


def _frame_extent(view: memoryview | bytes) -> tuple[int, int | None]:
    """The bytes the frame at the start of ``view`` takes, and the content size it declares (or None)."""
    header_size, declared, has_checksum = _frame_header(view)
    position, last = header_size, 0
    while not last:
        if position + _BLOCK_HEADER_SIZE > len(view):
            raise ChunkDecodeError(f"corrupt zstd data: truncated frame ({len(view)} bytes, a block header at {position})")
        block = int.from_bytes(view[position : position + _BLOCK_HEADER_SIZE], "little")
        last, block_type, block_size = block & 1, (block >> 1) & 3, block >> 3
        if block_type == _RESERVED_BLOCK:
            raise ChunkDecodeError(f"corrupt zstd data: reserved block type at byte {position}")
        position += _BLOCK_HEADER_SIZE + (1 if block_type == _RLE_BLOCK else block_size)
    return position + _CHECKSUM_SIZE * has_checksum, declared


def _check_frame(view: memoryview | bytes, nbytes: int) -> None:
    """Raise ChunkDecodeError unless ``view`` is one whole frame declaring ``nbytes`` (or no size)."""
    size, declared = _frame_extent(view)
    if declared is not None and declared != nbytes:
        raise ChunkDecodeError(f"the frame declares {declared} decoded bytes, expected {nbytes}")
    if size != len(view):
        raise ChunkDecodeError(f"corrupt zstd data: the frame takes {size} bytes, the chunk has {len(view)}")


#: bytes of each frame :func:`_check_frames` reads: the longest header and the first block header
_HEAD_SIZE = _MAX_HEADER_SIZE + _BLOCK_HEADER_SIZE


def _check_frames(frames: Sequence[memoryview | bytes], nbytes: int) -> None:
    """:func:`_check_frame` for many frames at once, with NumPy over their first bytes.

    Frames written by one writer for one decoded size share their header byte for byte
    (RFC 8878 3.1.1.1): the first frame's header is checked, then each frame's first block
    header (3.1.1.2) is read where that header ends. A frame with the same header whose first
    block is its last is whole when that block (and the checksum) ends where the chunk ends;
    any other frame (another header, several blocks, anything found wrong) is checked alone.
    """
    lengths = np.fromiter(map(len, frames), np.int64, len(frames))
    heads = b"".join([frame[:_HEAD_SIZE] for frame in frames])
    if len(heads) != _HEAD_SIZE * len(frames):  # frames shorter than _HEAD_SIZE: each padded with zeros
        heads = b"".join([bytes(frame[:_HEAD_SIZE]).ljust(_HEAD_SIZE, b"\0") for frame in frames])
    head = np.frombuffer(heads, np.uint8).reshape(len(frames), _HEAD_SIZE)
    header_size, declared, has_checksum = _frame_header(frames[0])
    if declared is not None and declared != nbytes:
        raise ChunkDecodeError(f"the frame declares {declared} decoded bytes, expected {nbytes}")
    same_header = (head[:, :header_size] == head[0, :header_size]).all(axis=1)
    block = head[:, header_size : header_size + _BLOCK_HEADER_SIZE].astype(np.int64)
    block = block[:, 0] | block[:, 1] << 8 | block[:, 2] << 16
    block_type, block_size = (block >> 1) & 3, block >> 3
    extent = header_size + _BLOCK_HEADER_SIZE + np.where(block_type == _RLE_BLOCK, 1, block_size) + _CHECKSUM_SIZE * has_checksum
    whole = same_header & (block & 1 == 1) & (block_type != _RESERVED_BLOCK) & (extent == lengths)
    for position in np.flatnonzero(~whole):
        _check_frame(frames[position], nbytes)


def frame_content_size(data: Buffer) -> int | None:
    """The Frame_Content_Size of the first zstd frame header, or None when not recorded.

    Raises ChunkDecodeError when ``data`` does not start with a complete frame header.

    Examples
    --------
    >>> frame_content_size(ZstdCodec(level=1).encode(bytes(1000)))
    1000
    """
    # libzstd's own header parse first (0.3 µs against 1.8-2.6 µs for the one below, on every chunk
    # read); it gives 0 for a skippable frame and fails on a bad header, so those two, and a
    # declared size of 0, go through the parse below, which names what is wrong
    try:
        size = zstandard.frame_content_size(data)
    except (zstandard.ZstdError, TypeError, ValueError, BufferError):
        size = 0
    if size > 0:
        return size
    if size == _UNKNOWN_CONTENT_SIZE:
        return None
    return _frame_header(data)[1]


def _frame_header(data: Buffer) -> tuple[int, int | None, bool]:
    """(header size, Frame_Content_Size or None, Content_Checksum_Flag) of the first frame."""
    header = data[:_MAX_HEADER_SIZE] if isinstance(data, bytes) else bytes(memoryview(data).cast("B")[:_MAX_HEADER_SIZE])
    if len(header) < 5 or int.from_bytes(header[:4], "little") != _MAGIC:
        raise ChunkDecodeError("not a zstd frame (bad magic number or too short)")
    descriptor = header[4]
    fcs_flag, single_segment, dict_id_flag = descriptor >> 6, (descriptor >> 5) & 1, descriptor & 3
    if descriptor & 0x08:
        raise ChunkDecodeError("invalid zstd frame header (reserved bit set)")
    fcs_size = 1 if (fcs_flag == 0 and single_segment) else _FCS_FIELD_SIZES[fcs_flag]
    start = 5 + (0 if single_segment else 1) + _DICT_ID_SIZES[dict_id_flag]
    if len(header) < start + fcs_size:
        raise ChunkDecodeError("truncated zstd frame header")
    has_checksum = bool(descriptor & 0x04)
    if fcs_size == 0:
        return start, None, has_checksum
    value = int.from_bytes(header[start : start + fcs_size], "little")
    # RFC 8878 3.1.1.1.4: the 2-byte field is offset by 256
    return start + fcs_size, value + 256 if fcs_size == 2 else value, has_checksum
