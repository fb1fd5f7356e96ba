"""The documentation builds in strict mode and every example in it runs.

- ``test_docs_build_strictly``: ``sphinx -W`` (every warning is an error) of ``docs/``,
  the API reference included, into a temporary folder.
- ``test_python_examples_run``: every ```` ```python ```` block of each page (and of the
  README), in order, in one namespace per page, in a fresh working directory. A block whose
  first line is ``# not run: <reason>`` is only shown (it needs a remote service).
- ``test_command_line_examples_run``: the python blocks and every ``$ zarrx ...`` line of the
  command-line page, in order, in one fresh working directory (lines with a URL, and
  commands ``zarrx`` does not have yet, are only shown).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(page for page in DOCS.rglob("*.md") if "_build" not in page.parts)
CLI_PAGE = DOCS / "user-guide" / "cli.md"

#: an opening or closing fence: indentation, backticks, info string
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<ticks>`{3,})(?P<info>[^`]*)$")
NOT_RUN = "# not run:"


def code_blocks(path: Path, languages: tuple[str, ...]) -> list[tuple[int, str]]:
    """(first line number, dedented source) of each fenced block whose language is one of ``languages``."""
    blocks = []
    lines = path.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        ticks, info = opening["ticks"], opening["info"].strip()
        body, index = [], index + 1
        while index < len(lines) and not re.match(rf"^[ \t]*{ticks}[ \t]*$", lines[index]):
            body.append(lines[index])
            index += 1
        start = index - len(body) + 1  # 1-based number of the first line of the body
        index += 1
        if info.split(" ")[0] in languages:
            blocks.append((start, textwrap.dedent("\n".join(body))))
    return blocks


def python_pages() -> list[Path]:
    return [page for page in [*PAGES, ROOT / "README.md"] if code_blocks(page, ("python",))]


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def test_docs_build_strictly(tmp_path):
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS), str(tmp_path / "html")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"strict docs build failed:\n{result.stdout}\n{result.stderr}"
    for page in ("index", "getting-started", "user-guide/index", "api/index", "api/zarrx"):
        assert (tmp_path / "html" / f"{page}.html").is_file(), page


def test_python_fences_are_spelled_python():
    # only ```python blocks run: a typo such as ```pyhton or ```py would silently skip one
    for page in PAGES:
        for text in page.read_text(encoding="utf-8").splitlines():
            match = FENCE.match(text)
            language = match["info"].strip().split(" ")[0] if match else ""
            assert not language.startswith("py") or language in ("python", "pycon"), (page, text)


@pytest.mark.parametrize("page", python_pages(), ids=page_id)
def test_python_examples_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    module = types.ModuleType("zarrx_docs_example")  # a real module: dataclasses and pickle look it up
    monkeypatch.setitem(sys.modules, module.__name__, module)
    namespace = module.__dict__
    ran = 0
    for line, source in code_blocks(page, ("python",)):
        if source.lstrip().startswith(NOT_RUN):
            continue
        try:
            exec(compile(source, f"{page_id(page)}:{line}", "exec"), namespace)
        except Exception as error:
            pytest.fail(f"the example at {page_id(page)}:{line} raised {error!r}:\n{source}")
        ran += 1
    assert ran, f"{page_id(page)} has python blocks but none runs"


def command_exists(main, command: str) -> bool:
    """Whether ``zarrx COMMAND --help`` succeeds (argparse exits 2 for an unknown command)."""
    try:
        main([command, "--help"])
    except SystemExit as exit:
        return exit.code == 0
    return True


def test_command_line_examples_run(tmp_path, monkeypatch, capsys):
    """The python blocks and ``$ zarrx ...`` lines of the command-line page, in order, in one folder.

    Lines with a URL (``s3://...``) need a remote store and are only shown; commands that
    ``zarrx`` does not have yet are skipped (the page may document them first).
    """
    from zarrx.tools.cli import main

    monkeypatch.chdir(tmp_path)
    module = types.ModuleType("zarrx_docs_example")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    ran, skipped = [], []
    for line, source in code_blocks(CLI_PAGE, ("python", "console")):
        if not source.startswith("$ "):
            exec(compile(source, f"{page_id(CLI_PAGE)}:{line}", "exec"), module.__dict__)
            continue
        for command in (text[2:] for text in source.splitlines() if text.startswith("$ zarrx ")):
            argv = shlex.split(command)[1:]
            if "://" in command or not command_exists(main, argv[0]):
                skipped.append(command)
                continue
            capsys.readouterr()
            try:
                code = main(argv)
            except SystemExit as exit:
                code = exit.code
            output = capsys.readouterr()
            assert not code, f"`{command}` exited with {code}:\n{output.out}\n{output.err}"
            ran.append(argv[0])
    assert {"demo", "convert"} <= set(ran), (ran, skipped)
