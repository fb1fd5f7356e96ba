"""zarrx.tools.display: what people see of a node -- ``str``, ``repr``, Jupyter's HTML, the tree.

The HTML is parsed back (``html.parser``) to check that every name and value is escaped
text, not markup, and that the structure is a bounded tree of ``<details>``.
"""

from __future__ import annotations

import html
from html.parser import HTMLParser

import numpy as np
import pytest

import zarrx
from zarrx.tools import display
from zarrx.codecs import TransposeCodec, ZstdCodec
from zarrx.storage import MemoryStore

HOSTILE = "<script>alert('x')</script> & \"quoted\""


class Structure(HTMLParser):
    """The tags, the text and the nesting depth of ``<details>`` of an HTML fragment."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []
        self.depth = self.max_depth = 0
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "details":
            self.depth += 1
            self.max_depth = max(self.max_depth, self.depth)

    def handle_endtag(self, tag):
        if tag == "details":
            self.depth -= 1

    def handle_data(self, data):
        self.text.append(data)

    @property
    def all_text(self) -> str:
        return "".join(self.text)


@pytest.fixture
def root():
    root = zarrx.create_group(MemoryStore(), attributes={"title": HOSTILE, "numbers": [1, 2, 3]})
    t2m = root.create_array(
        "t2m", shape=(365, 90, 180), chunks=(30, 45, 90), shards=(60, 90, 180), dtype="float32",
        compressors=[ZstdCodec(level=5)], dimension_names=["time", "lat", "lon"], fill_value=np.nan,
        attributes={"units": "K", "note": HOSTILE},
    )  # fmt: skip
    t2m[:30] = 1.0
    root.create_group("obs").create_array(
        "site<1>", shape=(5, 4), chunks=(5, 2), dtype="int16", filters=[TransposeCodec(order=(1, 0))]
    )
    return root


def test_html_escapes_every_name_and_value(root):
    page = root._repr_html_()
    assert "<script>" not in page and "site<1>" not in page
    assert html.escape(HOSTILE) in page and "site&lt;1&gt;" in page
    parsed = Structure(page)
    assert "script" not in parsed.tags  # the hostile value stayed text
    assert HOSTILE in parsed.all_text and "site<1>" in parsed.all_text
    assert parsed.depth == 0  # every <details> is closed


def test_html_shows_shapes_dtypes_chunks_shards_codecs_attributes(root):
    text = Structure(root._repr_html_()).all_text
    for fragment in [
        "t2m", "(365, 90, 180)", "float32", "chunks=(30, 45, 90) shards=(60, 90, 180)",
        "sharding_indexed(chunk_shape=(30, 45, 90), codecs=[bytes(endian=little), zstd(level=5)]",
        "time, lat, lon", "units", "Attributes (2)", "numbers", "[1, 2, 3]",
        "site<1>", "(5, 4)", "int16", "transpose(order=(1, 0))", "group: 1 array(s), 1 group(s)",
    ]:  # fmt: skip
        assert fragment in text, fragment
    array_page = Structure(root["t2m"]._repr_html_()).all_text
    assert "zarrx.Array (Zarr v3)" in array_page and "No. shards" in array_page and "7 (7, 1, 1)" in array_page


def test_huge_hierarchies_are_capped(root):
    many = root.create_group("many")
    for index in range(80):
        many.create_array(f"a{index:02d}", shape=(2,), dtype="int8", attributes={f"k{i}": i for i in range(60)})
    page = root["many"]._repr_html_()
    parsed = Structure(page)
    shown = display.HTML_LIMITS["max_children"]
    assert parsed.tags.count("details") == 1 + shown * 2  # the group, and per array itself and its attributes
    assert f"… and {80 - shown} more members not shown" in parsed.all_text
    assert "… and 10 more attributes" in parsed.all_text  # 50 of 60 attributes per node
    assert len(page) < 150_000
    assert f"… and {80 - display.TEXT_LIMITS['max_children']} more" in str(root["many"])


def test_the_node_budget_and_depth_bound_deep_trees():
    root = zarrx.create_group({})
    group = root
    for level in range(12):
        group = group.create_group(f"level{level}")
        group.create_array("x", shape=(1,), dtype="int8")
    parsed = Structure(root._repr_html_())
    assert parsed.max_depth == display.HTML_LIMITS["max_depth"] + 1
    assert "deeper levels not shown" in parsed.all_text
    entry = display.walk(root, max_nodes=5)
    count = lambda e: 1 + sum(count(child) for child in e.children)  # noqa: E731
    assert count(entry) == 6  # the root and five more
    assert "(deeper levels not shown)" in display.tree_text(root, max_depth=2)


def test_str_and_repr_are_informative(root):
    array = root["t2m"]
    assert "shape=(365, 90, 180)" in repr(array) and "float32" in repr(array) and "'/t2m'" in repr(array)
    described = str(array)
    for fragment in ["Shape             : (365, 90, 180)", "Chunk shape       : (30, 45, 90)",
                     "Shard shape       : (60, 90, 180)", "zstd(level=5)", 'Fill value        : "NaN"',
                     "Dimension names   : time, lat, lon", "No. chunks        : 52 (13, 2, 2)",
                     "No. shards        : 7 (7, 1, 1)", "  units: K"]:  # fmt: skip
        assert fragment in described, fragment
    tree = str(root)
    assert tree.splitlines()[0] == "/"
    assert "├── obs\n│   └── site<1> (5, 4) int16 chunks=(5, 2) codecs=[transpose(order=(1, 0)), bytes, zstd(level=0)]" in tree
    assert "└── t2m (365, 90, 180) float32 chunks=(30, 45, 90) shards=(60, 90, 180)" in tree


def test_tree_lines_keep_the_format_of_group_tree(root):
    """``Group.tree()`` and ``display.tree_text`` start each line alike, so either can be read."""
    ours = display.tree_text(root).splitlines()
    theirs = root.tree().splitlines()
    assert len(ours) == len(theirs)
    assert all(mine.startswith(line) for mine, line in zip(ours, theirs))


def test_stored_statistics_list_the_store(root):
    rows = dict(display.describe(root["t2m"], stored=True))
    chunk_keys = [key for key in root.store.list_prefix("t2m/c/")]
    stored = sum(len(root.store.get(key)) for key in chunk_keys)
    assert rows["Initialized"] == "1/7 shards" and len(chunk_keys) == 1
    assert rows["No. bytes stored"].startswith(f"{stored} ")
    assert rows["Compression ratio"] == f"{365 * 90 * 180 * 4 / stored:.2f}"
    assert "No. bytes stored" not in dict(display.describe(root["t2m"]))  # metadata only by default
    assert dict(display.describe(root, stored=True))["Members"] == "1 array(s), 1 group(s)"


def test_a_group_that_cannot_be_listed_is_shown_not_raised(root):
    root.store.set("obs/broken/zarr.json", b"{not json")
    text = str(root)
    assert "!! cannot list its members:" in text and "obs/broken/zarr.json" in text
    assert "t2m (365, 90, 180)" in text  # the rest is still shown
    assert "obs/broken/zarr.json" in Structure(root._repr_html_()).all_text
    assert [entry.name for entry in display.errors(display.walk(root))] == ["obs"]


def test_other_formats_and_types_are_described():
    v2 = zarrx.create_array({}, shape=(4,), chunks=(2,), dtype="<f8", zarr_format=2)
    assert "Zarr v2" in str(v2) and "zarr-v2(" in display.summary(v2) and "compressor=" in display.summary(v2)
    times = zarrx.create_array({}, shape=(3,), dtype="M8[s]")
    assert "numpy.datetime64(unit=s, scale_factor=1) (numpy datetime64[s])" in str(times)
    assert display.human_bytes(1536) == "1.5 KiB" and display.human_bytes(12) == "12 B"
