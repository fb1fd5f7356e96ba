"""The memory a large read's output lives in: small pages where the system has huge ones.

NumPy advises huge pages for every array of 4 MiB or more; zarrx allocates outputs of 1 GiB and
more in small pages instead (:func:`zarrx.scratch.fresh_array`: on the benchmark machine a cold
copy of 1 GiB took 2.4-3.0 s after a read into huge pages, 1.2-1.9 s after one into small
pages). These tests lower that size to MiBs (``small_pages_from``) and read the kernel's own
account of each mapping (``/proc/self/smaps``: ``nh`` = no huge pages).
"""

from __future__ import annotations

import gc
import mmap
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import zarrx
import zarrx.scratch
from zarrx.scratch import fresh_array

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/smaps is Linux's")
MIN_SMALL_PAGE_BYTES = 16 * 2**20


@pytest.fixture(autouse=True)
def small_pages_from(monkeypatch):
    """Outputs from 16 MiB in small pages (1 GiB outside these tests)."""
    monkeypatch.setattr(zarrx.scratch, "MIN_SMALL_PAGE_BYTES", MIN_SMALL_PAGE_BYTES)


def mapping_flags(address: int) -> set[str] | None:
    """The VmFlags of the mapping holding ``address`` in this process (None: no mapping holds it)."""
    inside = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split(maxsplit=1)[0]
            if "-" in head and not head.endswith(":"):
                low, high = (int(bound, 16) for bound in head.split("-"))
                inside = low <= address < high
            elif inside and head == "VmFlags:":
                return set(line.split()[1:])
    return None


def test_a_large_read_lands_in_small_pages(tmp_path):
    shape = (64, 256, 1024)  # 32 MiB of uint16
    values = np.arange(np.prod(shape), dtype=np.uint32).astype(np.uint16).reshape(shape)
    array = zarrx.create_array(str(tmp_path / "a.zarr"), shape=shape, chunks=(32, 128, 512), dtype="uint16")
    array[...] = values
    out = array[...]
    assert out.nbytes >= MIN_SMALL_PAGE_BYTES
    np.testing.assert_array_equal(out, values)
    assert out.flags.c_contiguous and out.flags.writeable
    flags = mapping_flags(out.ctypes.data + out.nbytes // 2)
    assert flags is not None and "nh" in flags, flags
    out[0, 0, 0] = 7  # the user's own array: writeable, and ours no more
    assert array[0, 0, 0] == values[0, 0, 0]


def test_the_advice_covers_the_whole_array_and_goes_with_it():
    out = fresh_array((64 * 2**20,), np.dtype("uint8"))  # above malloc's largest threshold: its own mapping
    assert out.flags.owndata  # NumPy's array as ever (tracemalloc counts it)
    first, last = out.ctypes.data + mmap.PAGESIZE, out.ctypes.data + out.nbytes - 1
    assert "nh" in mapping_flags(first) and "nh" in mapping_flags(last)
    view = out[10:20]
    del out
    gc.collect()
    assert mapping_flags(first) is not None  # a view keeps it
    del view
    gc.collect()
    flags = mapping_flags(first)
    assert flags is None or "nh" not in flags  # unmapped (or another mapping took the address)


def test_outputs_under_the_size_keep_numpys_advice(monkeypatch):
    size = 64 * 2**20  # above malloc's largest threshold: each its own mapping
    monkeypatch.setattr(zarrx.scratch, "MIN_SMALL_PAGE_BYTES", size)
    out = fresh_array((size,), np.dtype("uint8"))
    assert "nh" in mapping_flags(out.ctypes.data + size // 2)
    monkeypatch.setattr(zarrx.scratch, "MIN_SMALL_PAGE_BYTES", size + 1)
    out = fresh_array((size,), np.dtype("uint8"))
    assert {"nh", "hg"} & mapping_flags(out.ctypes.data + size // 2) == {"hg"}  # NumPy's huge pages


def test_outputs_of_other_data_types_are_allocated_as_ever():
    objects = fresh_array((MIN_SMALL_PAGE_BYTES // 8,), np.dtype(object))
    assert objects.dtype == object and objects[0] is None
    strings = fresh_array((MIN_SMALL_PAGE_BYTES // 4,), np.dtypes.StringDType())
    assert strings.shape == (MIN_SMALL_PAGE_BYTES // 4,) and strings[0] == ""
    records = fresh_array((MIN_SMALL_PAGE_BYTES // 8,), np.dtype([("a", "u4"), ("b", "f4")]))
    assert "nh" in mapping_flags(records.ctypes.data + records.nbytes // 2)


def test_zarrx_huge_pages_keeps_numpys_advice():
    script = textwrap.dedent(
        """
        import numpy as np
        import zarrx.scratch
        from tests.test_output_memory import mapping_flags
        from zarrx.scratch import fresh_array
        zarrx.scratch.MIN_SMALL_PAGE_BYTES = 16 * 2**20
        out = fresh_array((64 * 2**20,), np.dtype("uint8"))
        print(" ".join(sorted(mapping_flags(out.ctypes.data + out.nbytes // 2) & {"hg", "nh"})))
        """
    )
    for setting, advice in (("1", "hg"), ("", "nh")):
        found = subprocess.run([sys.executable, "-c", script], env={**os.environ, "ZARRX_HUGE_PAGES": setting},
                               capture_output=True, text=True, check=True, cwd=Path(__file__).parent.parent)  # fmt: skip
        assert found.stdout.strip() == advice, (setting, found.stderr)
