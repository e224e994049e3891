"""The documentation site: the options page generated from the code, and the built site as a browser shows it.

The options reference is ``OPTION_DOCS`` in ``sharegroup_source/options.py``, put on the page at build time by
``docs/hooks/options_page.py``: these tests fail when an option the parser reads has no doc line, when a doc
line strays from one line or from the code's default, and when the README or a page names an option that does not
exist. The site is built with warnings as errors (broken links and anchors included) and opened in Debian's
headless Chromium (``make test`` and ``make check`` install it), which must render the home, first-job and options
pages with their content.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import fields
from html.parser import HTMLParser
from pathlib import Path
from types import ModuleType

import pytest

from sharegroup_source.options import LEGACY_GROUP_SETTINGS, OPTION_DOCS, SourceOptions

ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs"
OPTIONS_SOURCE = ROOT / "sharegroup_source" / "options.py"
CHROMIUM = Path("/usr/bin/chromium")
BASE = {"kafka.bootstrap.servers": "b:9092", "kafka.group.id": "g", "subscribe": "t", "stateLocation": "/s"}

#: An option name as the parser reads it: _positive(lowered, "maxRecordsPerTrigger", ...), lowered.get("coordinator")
PARSED = re.compile(r'\b(?:_positive|_boolean|_required|_location|_optional_location|_optional_delta_location)'
                    r'\(\s*\w+,\s*"([^"]+)"')
LOOKED_UP = re.compile(r'\b(?:lowered|options)\.get\("([^"]+)"')
#: An option as the README and the pages name it: .option("name", ...), the option `name`, option 'name'
NAMED = (re.compile(r'\.option\(\s*"([^"]+)"'), re.compile(r"\boptions? `([A-Za-z][^`\s]*)`"),
         re.compile(r"(?<!unknown )\boption '([A-Za-z][^'\s<]*)'"))


def _pages() -> dict[str, str]:
    """The README and every page of the site, by path."""
    pages = [ROOT / "README.md", *sorted(path for path in DOCS.rglob("*.md"))]
    return {str(path.relative_to(ROOT)): path.read_text(encoding="utf-8") for path in pages}


def _families() -> list[str]:
    """The prefixes of the option families, as documented: kafka., stateStorage., groupConfig."""
    return [doc.name[:-1] for doc in OPTION_DOCS if doc.name.endswith(".*")]


def _exists(name: str) -> bool:
    """Whether ``name`` is an option of the source, spelt as the options page spells it."""
    return (name in {doc.name for doc in OPTION_DOCS} or name in LEGACY_GROUP_SETTINGS
            or any(name.startswith(prefix) and len(name) > len(prefix) for prefix in _families()))


def test_every_option_the_parser_reads_has_its_doc_line():
    source = OPTIONS_SOURCE.read_text(encoding="utf-8")
    read = {name.lower() for name in PARSED.findall(source) + LOOKED_UP.findall(source)}
    assert {"maxrecordspertrigger", "coordinator", "startingoffsets", "grouplocation"} <= read, read
    documented = {doc.name.lower() for doc in OPTION_DOCS}
    assert not read - documented, f"options the parser reads without a line in OPTION_DOCS: {sorted(read - documented)}"
    # every field SourceOptions fills is some option's, and every option fills one
    attributes = [doc.attribute for doc in OPTION_DOCS]
    assert sorted(attributes) == sorted(field.name for field in fields(SourceOptions)), attributes
    assert len(documented) == len(OPTION_DOCS), "an option is documented twice"


def test_each_option_has_one_line_of_meaning_and_the_default_of_the_code():
    parsed = SourceOptions.parse(BASE)
    for doc in OPTION_DOCS:
        assert doc.meaning.strip() and "\n" not in doc.meaning and doc.meaning.endswith("."), doc
        assert len(doc.meaning) <= 200, f"{doc.name}: one line of meaning, not {len(doc.meaning)} characters"
        # measurements belong on the benchmarks page, with their dates
        assert not re.search(r"\b20\d\d-\d\d-\d\d\b|records/s|\bp50\b|\d ms\b", doc.meaning), doc.meaning
        assert doc.coordinator in ("both", "broker", "delta"), doc
        value = getattr(parsed, doc.attribute)
        if doc.required:
            assert value, doc
        elif doc.name.endswith(".*"):
            assert isinstance(value, Mapping), doc
        else:
            assert value == doc.default and type(value) is type(doc.default), (doc.name, value, doc.default)


def test_the_docs_name_no_option_that_does_not_exist():
    named = {(page, name) for page, text in _pages().items() for pattern in NAMED for name in pattern.findall(text)}
    assert len(named) > 30, "the patterns no longer find the options the pages name"
    unknown = sorted(f"{page}: {name}" for page, name in named if not _exists(name))
    assert not unknown, "options named in the docs that the source does not have (or not in their documented " \
                        "spelling):\n" + "\n".join(unknown)


def _options_hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("options_page", DOCS / "hooks" / "options_page.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_options_page_has_its_marker_and_a_row_per_option():
    hook = _options_hook()
    assert hook.MARKER in (DOCS / hook.PAGE).read_text(encoding="utf-8")
    table = hook.options_table()
    rows = [line for line in table.splitlines() if line.startswith('| <a id="')]
    assert len(rows) == len(OPTION_DOCS)
    for doc, row in zip(OPTION_DOCS, rows, strict=True):
        assert f'id="{hook.anchor(doc)}"' in row and f"| {doc.default_shown} |" in row and doc.meaning in row


# -- the built site in a browser -------------------------------------------------------------------------------
class _Page(HTMLParser):
    """What a reader sees of a rendered page: its headings, its text, and its tables' rows (cells as text)."""

    def __init__(self) -> None:
        super().__init__()
        self.headings: list[str] = []
        self.rows: list[list[str]] = []
        self.text: list[str] = []
        self.classes: set[str] = set()
        self._heading: list[str] | None = None
        self._cell: list[str] | None = None
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.classes.update((dict(attrs).get("class") or "").split())
        if tag in ("script", "style"):
            self._hidden += 1
        elif tag in ("h1", "h2", "h3"):
            self._heading = []
        elif tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style"):
            self._hidden -= 1
        elif tag in ("h1", "h2", "h3") and self._heading is not None:
            self.headings.append("".join(self._heading).replace("¶", "").strip())
            self._heading = None
        elif tag in ("td", "th") and self._cell is not None and self.rows:
            self.rows[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._hidden:
            return
        self.text.append(data)
        for part in (self._heading, self._cell):
            if part is not None:
                part.append(data)

    @property
    def plain(self) -> str:
        return " ".join("".join(self.text).split())


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as ``make check`` builds it: strict, so a broken link or anchor fails here too."""
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
                           capture_output=True, text=True, timeout=240, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-4000:]
    return out


def _rendered(page: Path) -> _Page:
    """``page`` as headless Chromium renders it (its scripts run), from the file system, with no network."""
    if not CHROMIUM.exists():
        if shutil.which("apt-get"):
            pytest.fail(f"{CHROMIUM} is missing: `make chromium` installs Debian's chromium")
        pytest.skip(f"{CHROMIUM} is missing and this machine has no apt-get to install it")
    with tempfile.TemporaryDirectory(prefix="sharegroup-chromium-") as profile:
        shown = subprocess.run(
            [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
            capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and "</html>" in shown.stdout, shown.stderr[-3000:]
    parsed = _Page()
    parsed.feed(shown.stdout)
    # Material's script ran: it adds a copy button to each code block
    assert "md-code__button" in parsed.classes, f"{page.name}: the theme's script did not run"
    return parsed


def test_the_home_page_renders(site: Path):
    page = _rendered(site / "index.html")
    assert page.headings[0] == "sharegroup-source", page.headings
    assert {"Start here", "Guides", "Reference"} <= set(page.headings), page.headings
    assert 'gives Spark queue semantics' in page.plain
    assert 'spark.readStream.format("sharegroup")' in page.plain


def test_the_first_job_page_renders(site: Path):
    page = _rendered(site / "first-job.html")
    assert page.headings[0] == "Your first job on your own topic", page.headings
    assert "5. Check with sharegroup describe" in page.headings, page.headings
    assert "sharegroup describe --group payments-workers --bootstrap-servers $BOOTSTRAP" in page.plain
    assert 'print(f"{len(ids)} rows, {len(set(ids))} distinct payments")' in page.plain


def test_the_options_page_renders_a_row_per_option_from_the_code(site: Path):
    page = _rendered(site / "options.html")
    assert page.headings[0] == "Options", page.headings
    rows = {row[0]: row[1:] for row in page.rows if len(row) == 4}
    assert rows.pop("option") == ["default", "coordinator", "meaning"]
    assert len(rows) == len(OPTION_DOCS), sorted(rows)
    for doc in OPTION_DOCS:
        shown = next(name for name in rows if name.split(".<")[0] == doc.name.removesuffix(".*"))
        assert rows[shown][:2] == [doc.default_shown, doc.coordinator], (doc.name, rows[shown])
        assert rows[shown][2] == " ".join(doc.meaning.replace("`", "").split()), (doc.name, rows[shown])
    assert rows["maxRecordsPerTrigger"][0] == "what the in-flight windows hold"


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


def unclosed_fence(text: str) -> int | None:
    """The line number of a code fence that nothing closes (CommonMark: a fence closes on a line of at least as many
    of its characters and no info string), or None. Markdown renders the rest of the page as code after one."""
    opened: tuple[str, int] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        found = _FENCE.match(line)
        if found is None:
            continue
        marks, info = found.groups()
        if opened is None:
            opened = (marks, number)
        elif marks[0] == opened[0][0] and len(marks) >= len(opened[0]) and not info.strip():
            opened = None
    return None if opened is None else opened[1]


@pytest.mark.parametrize("page", [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))], ids=lambda p: p.name)
def test_every_code_fence_is_closed(page: Path):
    assert unclosed_fence(page.read_text(encoding="utf-8")) is None, \
        f"{page.relative_to(ROOT)}:{unclosed_fence(page.read_text(encoding='utf-8'))}: a code fence is never closed"


def test_an_unclosed_fence_is_found():
    assert unclosed_fence("text\n\n```python\nx = 1\n```\n\n```python\n\nmore text\n") == 7
    assert unclosed_fence("````\n```\nnot closed by fewer\n````\n") is None
