"""Sphinx configuration of the zarrx documentation.

Build (strict: every warning is an error)::

    python -m sphinx -W --keep-going -b html docs docs/_build/html

The pages are Markdown (MyST); the API reference is generated from the numpydoc
docstrings by autodoc + napoleon. tests/test_docs.py runs this build and every
``python`` example of the pages.
"""

import zarrx

project = "zarrx"
author = "the zarrx developers"
copyright = "the zarrx developers"
release = version = zarrx.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "**/.ipynb_checkpoints"]

# MyST: ```{directive} fences, tables, $math$ off, heading anchors for [text](page.md#anchor).
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# autodoc: the docstrings are numpydoc; signatures show type hints; __all__ decides members.
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_typehints = "signature"
autodoc_member_order = "bysource"
autodoc_preserve_defaults = True
# the docstrings' default role: `name` is code
default_role = "code"

html_theme = "pydata_sphinx_theme"
html_title = f"zarrx {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": [],
}
html_sidebars = {"**": ["sidebar-nav-bs"]}
html_static_path = []
