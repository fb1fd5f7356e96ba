"""A local store never reads, writes or deletes outside its root through a symbolic link.

Mirrors ``zarrx/storage/containment.py``. Every test runs with each way this machine can resolve
keys (``kernel``: ``openat2`` with ``RESOLVE_BENEATH``; ``walk``: ``O_NOFOLLOW`` opens of folder
descriptors; ``paths``: checked path strings, the fallback without ``dir_fd`` calls), so the
fallbacks are proven too. The layout of issue 22: a store whose array folder holds
``a/c -> ../../outside/cdir``.
"""

from __future__ import annotations

import os
import subprocess
import time
import sys
from pathlib import Path

import numpy as np
import pytest

import zarrx
from zarrx.errors import OutsideStoreError, StoreError, UsageError
from zarrx.storage import LocalStore, make_store
from zarrx.storage import containment, folder_calls

pytestmark = pytest.mark.skipif(not hasattr(os, "symlink") or os.name == "nt", reason="needs POSIX symbolic links")

PRECIOUS = b"precious bytes outside the store"


@pytest.fixture(params=[name for name, available in containment.RESOLUTIONS.items() if available], autouse=True)
def resolution(request, monkeypatch):
    """Each available way of resolving keys, as every new LocalStore picks it."""
    for name in containment.RESOLUTIONS:
        if name != request.param:
            monkeypatch.setitem(containment.RESOLUTIONS, name, False)
    return request.param


def snapshot(root: Path) -> dict[str, bytes | str | None]:
    """Every file (its bytes), folder (None) and link (its target) below ``root``, links not followed."""
    found: dict[str, bytes | str | None] = {}
    for folder, folders, files in os.walk(root):
        for name in folders + files:
            path = Path(folder, name)
            key = str(path.relative_to(root))
            found[key] = os.readlink(path) if path.is_symlink() else None if path.is_dir() else path.read_bytes()
    return found


@pytest.fixture
def escape(tmp_path) -> Path:
    """``store/a`` (4 int8 in chunks of 2, fill 0, raw bytes) whose chunk folder ``a/c`` is a link
    to ``outside/cdir``, which holds a file named like a chunk; returns ``tmp_path``."""
    (tmp_path / "outside" / "cdir").mkdir(parents=True)
    (tmp_path / "outside" / "cdir" / "0").write_bytes(PRECIOUS)
    zarrx.create_array(tmp_path / "store", "a", shape=(4,), chunks=(2,), dtype="int8", fill_value=0, compressors=None)
    os.symlink("../../outside/cdir", tmp_path / "store" / "a" / "c")
    return tmp_path


# -- the layout of issue 22 ---------------------------------------------------------------------------
def test_a_write_through_a_linked_folder_creates_and_overwrites_nothing_outside(escape):
    before = snapshot(escape / "outside")
    array = zarrx.open_array(escape / "store", "a", mode="r+")
    with pytest.raises(OutsideStoreError, match=r"'a/c/0'.*'a/c' is a symbolic link to '../../outside/cdir'"):
        array[:] = 9
    assert snapshot(escape / "outside") == before
    with pytest.raises(OutsideStoreError, match="writes and deletions never leave it"):
        zarrx.open_array(escape / "store", "a", mode="r+", storage_options={"follow_external_links": True})[:] = 9
    assert snapshot(escape / "outside") == before


def test_a_deletion_through_a_linked_folder_deletes_nothing_outside(escape):
    before = snapshot(escape / "outside")
    with pytest.raises(OutsideStoreError, match=r"cannot delete 'a/c/0'"):
        zarrx.open_array(escape / "store", "a", mode="r+")[:] = 0  # all fill value: the chunks are deleted
    assert snapshot(escape / "outside") == before


def test_reads_through_a_linked_folder_are_refused_unless_the_store_follows_external_links(escape):
    (escape / "outside" / "cdir" / "0").write_bytes(bytes([5, 6]))
    with pytest.raises(OutsideStoreError, match=r"cannot read 'a/c/0'.*follow_external_links=True"):
        zarrx.open_array(escape / "store", "a")[:]
    expected = [5, 6, 0, 0]
    for store in (
        LocalStore(escape / "store", follow_external_links=True),
        make_store(escape / "store", follow_external_links=True),
        escape / "store",
    ):
        options = {"follow_external_links": True} if isinstance(store, Path) else None
        np.testing.assert_array_equal(zarrx.open_array(store, "a", storage_options=options)[:], expected)


def test_verify_reports_links_out_of_the_root(escape):
    report = zarrx.verify(escape / "store")
    assert not report.ok
    assert [(problem.key, problem.error) for problem in report.external_links] == [
        ("a/c", f"a symbolic link to '../../outside/cdir', outside the store root")
    ]
    assert "links out of the store root" in str(report) and "'../../outside/cdir'" in str(report)
    followed = zarrx.verify(escape / "store", storage_options={"follow_external_links": True})
    assert followed.external_links == report.external_links and followed.external_links_followed
    assert [problem.key for problem in followed.corrupt] == ["a/c/0"]  # read through the link: not a chunk
    (escape / "outside" / "cdir" / "0").write_bytes(bytes([5, 6]))
    assert zarrx.verify(escape / "store", storage_options={"follow_external_links": True}).ok


def test_zarrx_verify_on_the_command_line_fails_on_a_link_out_of_the_root(escape):
    result = subprocess.run(
        [sys.executable, "-m", "zarrx", "verify", str(escape / "store")], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "a/c: a symbolic link to '../../outside/cdir'" in result.stdout


# -- links out of the root, every kind ------------------------------------------------------------------
def test_a_linked_node_out_of_the_root_is_neither_listed_nor_opened(tmp_path):
    outside = zarrx.create_array(tmp_path / "outside", shape=(2,), dtype="int8", fill_value=3)
    root = zarrx.create_group(tmp_path / "store")
    root.create_array("inside", shape=(1,), dtype="int8")
    os.symlink(tmp_path / "outside", tmp_path / "store" / "elsewhere")  # an absolute link
    assert sorted(zarrx.open_group(tmp_path / "store")) == ["inside"]
    with pytest.raises(OutsideStoreError, match=r"'elsewhere/zarr.json'.*'elsewhere' is a symbolic link"):
        zarrx.open_array(tmp_path / "store", "elsewhere")
    followed = zarrx.open_group(tmp_path / "store", storage_options={"follow_external_links": True})
    assert sorted(followed) == ["elsewhere", "inside"]
    np.testing.assert_array_equal(followed["elsewhere"][:], outside[:])
    del zarrx.open_group(tmp_path / "store", mode="r+")["inside"]  # deleting a sibling leaves the link alone
    assert (tmp_path / "store" / "elsewhere").is_symlink() and (tmp_path / "outside" / "zarr.json").exists()


def test_deleting_a_linked_node_removes_the_link_only(tmp_path):
    zarrx.create_array(tmp_path / "outside", shape=(2,), dtype="int8")[:] = 1
    zarrx.create_group(tmp_path / "store")
    os.symlink("../outside", tmp_path / "store" / "elsewhere")
    before = snapshot(tmp_path / "outside")
    LocalStore(tmp_path / "store").delete_prefix("elsewhere/")
    assert not (tmp_path / "store" / "elsewhere").exists() and snapshot(tmp_path / "outside") == before


def test_deleting_below_a_linked_folder_is_refused(escape):
    (escape / "outside" / "cdir" / "sub").mkdir()
    (escape / "outside" / "cdir" / "sub" / "0").write_bytes(PRECIOUS)
    before = snapshot(escape / "outside")
    store = LocalStore(escape / "store")
    for delete in (lambda: store.delete_prefix("a/c/sub/"), lambda: store.delete("a/c/sub/0")):
        with pytest.raises(OutsideStoreError, match="'a/c'"):
            delete()
    with pytest.raises(OutsideStoreError):
        store.set("a/c/new/0", b"x")  # no folder is created outside either
    assert snapshot(escape / "outside") == before


def test_a_chunk_linked_out_of_the_root_is_refused_and_replaced_not_written_through(tmp_path):
    (tmp_path / "secret").write_bytes(PRECIOUS)
    array = zarrx.create_array(tmp_path / "store", shape=(4,), chunks=(2,), dtype="int8", compressors=None)
    array[:] = 1
    (tmp_path / "store" / "c" / "1").unlink()
    os.symlink(tmp_path / "secret", tmp_path / "store" / "c" / "1")
    with pytest.raises(OutsideStoreError, match=r"'c/1'.*'c/1' is a symbolic link to"):
        zarrx.open_array(tmp_path / "store")[:]
    zarrx.open_array(tmp_path / "store", mode="r+")[2:] = 7  # the link is replaced, its target untouched
    assert (tmp_path / "secret").read_bytes() == PRECIOUS
    assert not (tmp_path / "store" / "c" / "1").is_symlink()
    np.testing.assert_array_equal(zarrx.open_array(tmp_path / "store")[:], [1, 1, 7, 7])


@pytest.mark.parametrize(
    "target",
    ["../../outside/cdir", "../../store/../outside/cdir", "../../../{tmp}/outside/cdir", "{tmp}/outside/cdir",
     "{tmp}/store/a/../../outside/cdir", "/"],
)  # fmt: skip
def test_every_spelling_of_a_way_out_is_refused(escape, target):
    link = escape / "store" / "a" / "c"
    link.unlink()
    os.symlink(target.format(tmp=str(escape).lstrip("/") if target.startswith("../../../") else escape), link)
    before = snapshot(escape / "outside")
    array = zarrx.open_array(escape / "store", "a", mode="r+")
    for action in (lambda: array[:], lambda: array.__setitem__(slice(None), 9), lambda: array.__setitem__(slice(None), 0)):
        with pytest.raises(OutsideStoreError):
            action()
    assert snapshot(escape / "outside") == before


def test_a_link_out_of_the_root_inside_a_link_that_stays_is_refused(escape):
    (escape / "store" / "hop").mkdir()
    os.symlink("../../outside", escape / "store" / "hop" / "out")
    link = escape / "store" / "a" / "c"
    link.unlink()
    os.symlink("../hop/out/cdir", link)
    with pytest.raises(OutsideStoreError, match="'hop/out' is a symbolic link to '../../outside'"):
        zarrx.open_array(escape / "store", "a", mode="r+")[:] = 9
    assert (escape / "outside" / "cdir" / "0").read_bytes() == PRECIOUS


# -- links that stay inside are fine -----------------------------------------------------------------------
@pytest.mark.parametrize("absolute", [False, True])
def test_links_that_stay_inside_the_root_are_followed(tmp_path, absolute):
    store = tmp_path / "store"
    array = zarrx.create_array(store, "a", shape=(4,), chunks=(2,), dtype="int8", fill_value=0, compressors=None)
    (store / "shared").mkdir()
    os.symlink(store / "shared" if absolute else "../shared", store / "a" / "c")
    array[:] = [1, 2, 3, 4]
    assert sorted(os.listdir(store / "shared")) == ["0", "1"]
    np.testing.assert_array_equal(zarrx.open_array(store, "a")[:], [1, 2, 3, 4])
    assert sorted(LocalStore(store).list_prefix("a/")) == ["a/c/0", "a/c/1", "a/zarr.json"]
    assert zarrx.verify(store).ok and zarrx.verify(store).external_links == []
    array[:] = 0  # deleted through the link; the link itself stays
    assert os.listdir(store / "shared") == [] and (store / "a" / "c").is_symlink()
    np.testing.assert_array_equal(zarrx.open_array(store, "a")[:], [0, 0, 0, 0])


def test_a_root_reached_through_a_link_is_the_root(tmp_path):
    """The root is trusted as given; absolute links into it by its real path stay inside."""
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "alias")
    array = zarrx.create_array(tmp_path / "alias" / "store", "a", shape=(2,), chunks=(2,), dtype="int8")
    (tmp_path / "real" / "store" / "shared").mkdir()
    os.symlink(tmp_path / "real" / "store" / "shared", tmp_path / "real" / "store" / "a" / "c")
    array[:] = 5
    assert os.listdir(tmp_path / "real" / "store" / "shared") == ["0"]


def test_link_loops_fail_with_a_store_error_naming_the_key(tmp_path):
    array = zarrx.create_array(tmp_path / "store", "a", shape=(2,), chunks=(2,), dtype="int8")
    os.symlink("d", tmp_path / "store" / "a" / "c")
    os.symlink("c", tmp_path / "store" / "a" / "d")
    for action in (lambda: array[:], lambda: array.__setitem__(slice(None), 1)):
        with pytest.raises(StoreError, match="'a/c/0'") as info:
            action()
        assert not isinstance(info.value, OutsideStoreError)


# -- races: a folder swapped for a link while a write is under way ----------------------------------------
#: the resolutions that are race-free (all but checked paths, the fallback without dir_fd calls)
RACE_FREE = [name for name, available in containment.RESOLUTIONS.items() if available and name != "paths"]


@pytest.mark.parametrize("resolution", RACE_FREE, indirect=True)
def test_a_folder_swapped_for_a_link_after_it_was_opened_keeps_the_write_inside(escape, monkeypatch):
    """The write happens in the folder the walk opened, not in whatever the path names later."""
    link = escape / "store" / "a" / "c"
    link.unlink()
    link.mkdir()
    before = snapshot(escape / "outside")
    opened_file = folder_calls.DescriptorCalls.open_file

    def swap_then_open(self, folder, name, flags):
        if name.startswith(".0.") and link.is_dir() and not link.is_symlink():
            link.rename(escape / "store" / "a" / "moved")
            os.symlink("../../outside/cdir", link)
        return opened_file(self, folder, name, flags)

    monkeypatch.setattr(folder_calls.DescriptorCalls, "open_file", swap_then_open)
    zarrx.open_array(escape / "store", "a", mode="r+")[:2] = 9
    assert (escape / "store" / "a" / "moved" / "0").read_bytes() == bytes([9, 9])
    assert snapshot(escape / "outside") == before


SWAPPER = """
import os, shutil, sys, pathlib
folder, real, stop, enough = map(pathlib.Path, sys.argv[1:5])
swaps = 0
while not stop.exists():
    try:
        folder.rename(real)
    except OSError:
        continue
    try:
        os.symlink("../../outside/cdir", folder)  # fails when a writer re-created the folder meanwhile
        folder.unlink()
        swaps += 1
        if swaps == 60:
            enough.touch()  # the writer goes on at least until then, however loaded the machine
    except OSError:
        pass
    finally:  # the real folder back in place, whatever a writer made meanwhile
        while real.exists():
            try:
                if folder.is_symlink():
                    folder.unlink()
                elif folder.exists():
                    shutil.rmtree(folder, ignore_errors=True)
                real.rename(folder)
            except OSError:
                pass
print(swaps)
"""


@pytest.mark.parametrize("resolution", RACE_FREE, indirect=True)
def test_writers_racing_a_folder_swapper_never_touch_anything_outside(escape):
    """Another process swaps the chunk folder for a link out of the root and back as fast as it
    can while this one writes and deletes chunks: whatever fails, nothing outside changes."""
    folder = escape / "store" / "a" / "c"
    folder.unlink()
    folder.mkdir()
    before = snapshot(escape / "outside")
    stop, enough = escape / "stop", escape / "enough"
    swapper = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(folder), str(escape / "store" / "a" / "real"), str(stop), str(enough)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    array = zarrx.open_array(escape / "store", "a", mode="r+")
    outcomes = {"written": 0, "refused": 0}
    try:
        round_ = 0
        deadline = time.monotonic() + 120
        while round_ < 400 or (not enough.exists() and time.monotonic() < deadline):
            round_ += 1
            try:
                array[:] = round_ % 5 if round_ % 3 else 0  # writes, and deletions of all-fill chunks
                outcomes["written"] += 1
            except StoreError:  # the folder is a link out at that moment, or is being moved
                outcomes["refused"] += 1
    finally:
        stop.touch()
        swaps = int(swapper.communicate(timeout=60)[0])
    assert snapshot(escape / "outside") == before
    assert swaps > 50 and outcomes["written"] > 0, (swaps, outcomes)


# -- the option, as a store ability --------------------------------------------------------------------------
def test_follow_external_links_is_an_ability_and_part_of_identity(tmp_path):
    plain, following = LocalStore(tmp_path), LocalStore(tmp_path, follow_external_links=True)
    assert not plain.follow_external_links and following.follow_external_links
    assert plain != following and "follow_external_links=True" in repr(following)
    assert zarrx.storage.MetricsStore(following).follow_external_links
    assert make_store(tmp_path, mode="r+", storage_options={"follow_external_links": True}) == following
    assert make_store(f"file://{tmp_path}", mode="a", follow_external_links=True) == following
    assert make_store({}).external_links() == [] and not make_store({}).follow_external_links
    with pytest.raises(UsageError, match="follow_external_links"):
        make_store(tmp_path, storage_options={"follow_external_links": "yes"})
    with pytest.raises(UsageError, match="follow_external_links"):
        make_store(plain, follow_external_links=True)
    with pytest.raises(StoreError, match="a local folder takes only follow_external_links"):
        make_store(tmp_path, storage_options={"anon": True})


def test_external_links_lists_every_link_out_of_the_root(escape):
    os.symlink("/etc/passwd", escape / "store" / "a" / "passwd")
    os.symlink("zarr.json", escape / "store" / "a" / "inside")
    store = LocalStore(escape / "store")
    assert store.external_links() == [("a/c", "../../outside/cdir"), ("a/passwd", "/etc/passwd")]
    assert store.external_links("a/") == store.external_links()
    assert store.list_dir("a/") == ["inside", "zarr.json"]  # what it can read
    assert sorted(store.list_prefix("")) == ["a/inside", "a/zarr.json", "zarr.json"]
    assert LocalStore(escape / "store", follow_external_links=True).list_dir("a/") == ["c", "inside", "passwd", "zarr.json"]
    assert sorted(LocalStore(escape / "store", follow_external_links=True).list_prefix("")) == [
        "a/c/0", "a/inside", "a/passwd", "a/zarr.json", "zarr.json"
    ]  # fmt: skip
