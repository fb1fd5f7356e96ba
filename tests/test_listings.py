"""Folder listings are requests like any other (issues 28 and 32).

A hierarchy without consolidated metadata is opened by listing each group's folder page. Those
listings used to go through fsspec's ``ls``, around the host's limiter and connection gate: on
``python -m http.server`` (a listen backlog of 5, a new connection per request) the burst of
listings of a 40-group tree overflowed the backlog and most opens waited for TCP's 1 s
retransmissions. zarrx now reads a folder page itself (``HttpReader.listing``), as it reads a
value, and reads its links as a browser does (Apache's and Caddy's pages too).

On other async file systems (s3fs, gcsfs, ...) a listing is the file system's own ``ls`` or
``find``, sent through the host's limiter as a read is.

Real servers on 127.0.0.1 (:mod:`tests.http_server`; exactly ``python -m http.server`` where the
page's form matters), real opens, and a file system from another package.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import unquote

import numpy as np
import pytest
import xarray as xr
from fsspec.asyn import AsyncFileSystem
from fsspec.implementations.http import HTTPFileSystem

import zarrx
from zarrx.errors import StoreError, StoreTimeoutError
from zarrx.storage import FsspecStore, make_store
from zarrx.storage.http import folder_links

from tests.http_server import FailFirst, IndexPages, Stall, serve, serve_plain
from tests.test_connections import limiter_of

GROUPS = 12


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """A DataTree of GROUPS groups, each with a variable and its index, not consolidated."""
    root = tmp_path_factory.mktemp("listed") / "tree.zarr"
    children = {
        f"/g{i}": xr.Dataset({"v": ("x", np.arange(4.0) + i)}, coords={"x": np.arange(4) * (i + 1)})
        for i in range(GROUPS)
    }
    xr.DataTree.from_dict(children).to_zarr(root, consolidated=False)
    return root


@pytest.fixture(scope="module")
def odd_names(tmp_path_factory):
    """A folder whose entries need quoting in a URL, beside ordinary ones."""
    root = tmp_path_factory.mktemp("odd")
    for name in ("zarr.json", "a b.json", "ümlaut", "per%cent", "semi;colon"):
        (root / name).write_text("{}")
    (root / "sub folder").mkdir()
    (root / "sub folder" / "x").write_text("1")
    return root


def test_the_links_of_a_folder_page_are_those_fsspec_lists(odd_names):
    with serve_plain(odd_names) as server:
        fs = HTTPFileSystem(skip_instance_cache=True, use_listings_cache=False)
        expected = fs.ls(server.url + "/", detail=False)
        page = fs.cat_file(server.url + "/").decode()
        assert folder_links(page, server.url + "/", fs) == expected
        # the store's names are those of fsspec's listing, percent-decoded: the names on disk
        # (fsspec's URLs keep the page's escapes; a node "sub folder" is not one "sub%20folder")
        store = make_store(server.url, mode="r")
        names = store.list_dir("")
        assert names == sorted({unquote(url[len(server.url) + 1 :].rstrip("/")) for url in expected})
        assert names == sorted(path.name for path in odd_names.iterdir())
        assert store.get("per%cent") == b"{}" and store.get("sub folder/x") == b"1"


def test_nodes_named_with_escapes_queries_fragments_and_spaces_are_read_over_http(tmp_path):
    # a key is any string: over HTTP it is percent-encoded into the URL, and a folder page's
    # links are decoded into keys. Before, "a%20b" was asked for as "a b", "x#1" as "x" (the
    # rest a fragment) and "q?r" as "q" (a query): their chunks read as missing, so fill values,
    # without an error; listed, "temp (K)" became a variable "temp%20(K)". engine="zarr" still
    # reads the first three as fill values, consolidated or not.
    names = ["temp (K)", "a%20b", "x#1", "q?r", "ünï", "plus+sign", "semi;colon", "star*", "br[0]", "tilde~"]
    dataset = xr.Dataset({name: ("t", np.arange(4.0) + i) for i, name in enumerate(names)})
    dataset.to_zarr(tmp_path / "listed.zarr", zarr_format=3, consolidated=False)
    dataset.to_zarr(tmp_path / "consolidated.zarr", zarr_format=3, consolidated=True)
    sub = zarrx.open_group(tmp_path / "listed.zarr", mode="a").create_group("ä b").create_group("c#d")
    sub.create_array("v?w", shape=(3,), dtype="i4", dimension_names=["t3"])[:] = [1, 2, 3]
    with serve_plain(tmp_path) as server:
        for name in ("listed.zarr", "consolidated.zarr"):
            opened = xr.open_dataset(f"{server.url}/{name}", engine="zarrx").load()
            xr.testing.assert_identical(opened, xr.open_dataset(tmp_path / name, engine="zarrx").load())
            xr.testing.assert_identical(opened, dataset)
        tree = xr.open_datatree(f"{server.url}/listed.zarr", engine="zarrx")
        assert tree["ä b/c#d"]["v?w"].values.tolist() == [1, 2, 3]
        assert zarrx.open_array(f"{server.url}/listed.zarr", "ä b/c#d/v?w")[:].tolist() == [1, 2, 3]
        # in a URL the user writes, "#" and "?" are a fragment and a query: escaped, they are names
        assert zarrx.open_array(f"{server.url}/listed.zarr/ä b/c%23d/v%3Fw")[:].tolist() == [1, 2, 3]


def test_links_to_other_places_and_the_parent_are_not_entries():
    page = (
        '<a href="../">up</a> <a href="/t.zarr/abs">abs</a> <a href="http://other/x">elsewhere</a>'
        ' <A HREF="https://h/t.zarr/s/">secure</A> see http://h/t.zarr/bare for more'
    )
    assert folder_links(page, "http://h/t.zarr/", None) == [
        "http://h/t.zarr/abs", "http://h/t.zarr/bare", "https://h/t.zarr/s/",
    ]  # fmt: skip


def test_every_request_of_an_open_goes_through_the_hosts_limiter(tree):
    with serve(tree.parent, keep_alive=False, backlog=5) as server:
        opened = xr.open_datatree(f"{server.url}/{tree.name}", engine="zarrx", consolidated=False)
        assert len(opened.children) == GROUPS
        assert opened["g5"]["v"].values.tolist() == [5.0, 6.0, 7.0, 8.0]
        listings = [r for r in server.requests if r.path.endswith("/")]
        assert len(listings) > GROUPS  # the root, every group and every array folder
        # listings included: each request the server answered was given its slot by the limiter
        assert limiter_of(server.url).counts["answers"] == server.count()


def test_a_refused_listing_is_retried_after_the_servers_retry_after(tree):
    behaviour = FailFirst(1, 503, paths=f"/{tree.name}/g3/")
    with serve(tree.parent, fail=behaviour) as server:
        opened = xr.open_datatree(f"{server.url}/{tree.name}", engine="zarrx", consolidated=False)
        assert opened["g3"]["x"].values.tolist() == [0, 4, 8, 12]
        refused = [r for r in server.requests if r.path.endswith("/g3/")]
        assert [r.status for r in refused] == [503, 200]


def test_a_listing_never_answered_ends_in_a_timeout_naming_the_group(tree):
    options = {"zarrx_timeout": 0.5, "zarrx_retries": 0}
    with serve(tree.parent, behaviour=Stall(paths="/g7/")) as server:
        group = zarrx.open_group(f"{server.url}/{tree.name}", mode="r", storage_options=options)
        with pytest.raises(StoreTimeoutError, match="g7"):
            group["g7"].members()


def test_a_listing_larger_than_a_value_may_be_is_refused(tree):
    with serve(tree.parent) as server:
        store = make_store(f"{server.url}/{tree.name}", mode="r", storage_options={"zarrx_max_read_size": 64})
        with pytest.raises(StoreError, match="64 bytes"):
            store.list_dir("")


def test_a_missing_folder_lists_nothing(tree):
    with serve(tree.parent) as server:
        store = make_store(f"{server.url}/{tree.name}", mode="r")
        assert store.list_dir("no/such/") == []
        assert store.list_dir("g1/") == sorted(["v", "x", "zarr.json"])


def test_a_prefix_is_listed_as_fsspec_finds_it(tree):
    with serve_plain(tree.parent) as server:
        url = f"{server.url}/{tree.name}"
        fs = HTTPFileSystem(skip_instance_cache=True, use_listings_cache=False)
        expected = sorted(path[len(url) + 1 :] for path in fs.find(url + "/"))
        assert "g11/x/c/0" in expected
        store = make_store(url, mode="r")
        assert list(store.list_prefix("")) == expected
        assert list(store.list_prefix("g1/")) == [key for key in expected if key.startswith("g1/")]
        # a string prefix: g1/, g10/ and g11/
        assert list(store.list_prefix("g1")) == [key for key in expected if key.startswith("g1")]
        assert list(store.list_prefix("g1/x/c/")) == ["g1/x/c/0"]
        assert list(store.list_prefix("nothing/")) == []


def test_counting_the_stored_chunks_lists_through_the_limiter(tmp_path):
    values = np.arange(64, dtype="i2").reshape(8, 8)
    zarrx.create_array(tmp_path / "a.zarr", shape=(8, 8), chunks=(2, 2), dtype="i2")[:6] = values[:6]
    with serve(tmp_path, keep_alive=False, backlog=5) as server:
        array = zarrx.open_array(f"{server.url}/a.zarr")
        assert array.nchunks_initialized == 12
        # the array's folder, c/, then c/0/ to c/2/ in one batch: each listing through the limiter
        assert sum(r.path.endswith("/") for r in server.requests) == 5
        assert limiter_of(server.url).counts["answers"] == server.count()


class SlowListings(AsyncFileSystem):
    """An async file system from another package: folders of empty files, each listing taking
    10 ms, counting the listings in flight."""

    protocol = "slowlistings"

    def __init__(self, folders: int) -> None:
        super().__init__(skip_instance_cache=True)
        self.folders = folders
        self.listing = self.most_listing = 0
        self.lock = threading.Lock()

    async def _ls(self, path, detail=True, **kwargs):
        with self.lock:
            self.listing += 1
            self.most_listing = max(self.most_listing, self.listing)
        try:
            await asyncio.sleep(0.01)
        finally:
            with self.lock:
                self.listing -= 1
        path = path.rstrip("/")
        if path == "root":
            names = [f"root/g{i}" for i in range(self.folders)]
            return [{"name": name, "type": "directory", "size": 0} for name in names] if detail else names
        if path.startswith("root/g"):
            return [{"name": f"{path}/zarr.json", "type": "file", "size": 0}] if detail else [f"{path}/zarr.json"]
        raise FileNotFoundError(path)


def test_listings_of_other_async_file_systems_are_paced_by_the_host_limit():
    fs = SlowListings(folders=128)
    store = FsspecStore(fs, "root", read_only=True, max_concurrency=8)
    assert store.list_dir("") == sorted(f"g{i}" for i in range(128))
    # 128 listings at once, from 64 threads, as a walk of a wide hierarchy sends them
    with ThreadPoolExecutor(64) as pool:
        listed = list(pool.map(store.list_dir, [f"g{i}/" for i in range(128)]))
    assert listed == [["zarr.json"]] * 128
    assert fs.most_listing <= 8, fs.most_listing  # the host's limit, not the threads, sets the pace
    assert store.list_dir("nothing/") == []


@pytest.mark.parametrize("style", ["apache", "caddy"])
def test_trees_open_from_other_servers_folder_pages(tree, style):
    expected = xr.open_datatree(tree, engine="zarrx", consolidated=False)
    with serve(tree.parent, behaviour=IndexPages(style)) as server:
        url = server.url
        # listed as fsspec lists them, Apache's sort links were entries (the "node" below one read the
        # page again: an error) and Caddy's "./g0/" links gave no group at all; engine="zarr" fails on both
        opened = xr.open_datatree(f"{url}/{tree.name}", engine="zarrx", consolidated=False)
        xr.testing.assert_identical(opened.load(), expected.load())
        assert make_store(f"{url}/{tree.name}", mode="r").list_dir("g3/") == ["v", "x", "zarr.json"]


def test_a_folder_page_in_a_charset_python_does_not_know_is_still_listed(tree):
    with serve(tree.parent, behaviour=IndexPages("apache", charset="x-no-such-charset")) as server:
        assert make_store(f"{server.url}/{tree.name}", mode="r").list_dir("g3/") == ["v", "x", "zarr.json"]


def test_a_server_without_folder_pages_is_an_error_not_an_empty_tree(tree):
    # S3 website endpoints, CDNs and many static hosts answer 404 for a folder URL: listed that way,
    # a tree without consolidated metadata looked like a group without children
    no_folder_pages = lambda method, path: 404 if path.endswith("/") else None  # noqa: E731
    with serve(tree.parent, fail=no_folder_pages) as server:
        url = f"{server.url}/{tree.name}"
        with pytest.raises(StoreError, match="does not show its own zarr.json.*consolidated metadata"):
            xr.open_datatree(url, engine="zarrx", consolidated=False)
        with pytest.raises(StoreError, match="group 'g2'"):  # a Dataset's variables are listed too
            xr.open_dataset(url, engine="zarrx", group="g2", consolidated=False)
        # what needs no listing still works: an array by its path
        assert zarrx.open_array(url, path="g2/v")[...].tolist() == [2.0, 3.0, 4.0, 5.0]
