"""The documentation site: the options page generated from the code, and the built site as a browser shows it.

The options reference is ``OPTION_DOCS`` in ``sharegroup_source/option_names.py``, put on the page at build time by
``docs/hooks/options_page.py``: these tests fail when an option the parser reads has no doc line, when a doc
line strays from one line or from the code's default, and when the README or a page names an option that does not
exist. The site is built with warnings as errors (broken links and anchors included) and opened in Debian's
headless Chromium (``make test`` and ``make check`` install it; one browser for the module, driven through its
DevTools protocol by ``tests/browser.py``), which must render the home, first-job and options pages with their
content, find a page by a word typed into the search box both from files and over HTTP, show every code block
without a horizontal scrollbar at 1280 pixels, and show each public function's signature in the API reference.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from dataclasses import fields
from html.parser import HTMLParser
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType

import pytest

from sharegroup_source.option_names import LEGACY_GROUP_SETTINGS, OPTION_DOCS
from sharegroup_source.options import SourceOptions
from tests.browser import WINDOW, Chromium

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


@pytest.fixture(scope="module")
def browser() -> Iterator[Chromium]:
    """One headless Chromium for the module's pages, each in a tab of its own, from the file system or over HTTP."""
    if not CHROMIUM.exists():
        if shutil.which("apt-get"):
            pytest.fail(f"{CHROMIUM} is missing: `make chromium` installs Debian's chromium")
        pytest.skip(f"{CHROMIUM} is missing and this machine has no apt-get to install it")
    chromium = Chromium(CHROMIUM)
    yield chromium
    chromium.close()


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    """The built site over HTTP on loopback, as ``mkdocs serve`` or any web server shows it: its base URL."""

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            """Each request unlogged: the test's output stays the test's."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, name="docs-http", daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/"
    server.shutdown()
    server.server_close()
    thread.join()


def _rendered(browser: Chromium, page: Path) -> _Page:
    """``page`` as headless Chromium renders it (its scripts run), from the file system, with no network."""
    tab = browser.open(page.as_uri())
    try:
        # Material's script ran: it adds a copy button to each code block
        tab.wait_for("document.querySelector('.md-code__button') !== null", f"{page.name}: the theme's script")
        parsed = _Page()
        parsed.feed(tab.evaluate("document.documentElement.outerHTML"))
    finally:
        tab.close()
    return parsed


def test_the_home_page_renders(site: Path, browser: Chromium):
    page = _rendered(browser, site / "index.html")
    assert page.headings[0] == "sharegroup-source", page.headings
    assert {"Start here", "Guides", "Reference"} <= set(page.headings), page.headings
    assert 'gives Spark queue semantics' in page.plain
    assert 'spark.readStream.format("sharegroup")' in page.plain


def test_the_first_job_page_renders(site: Path, browser: Chromium):
    page = _rendered(browser, site / "first-job.html")
    assert page.headings[0] == "Your first job on your own topic", page.headings
    assert "5. Check with sharegroup describe" in page.headings, page.headings
    assert "sharegroup describe --group payments-workers --bootstrap-servers $BOOTSTRAP" in page.plain
    assert 'print(f"{len(ids)} rows, {len(set(ids))} distinct payments")' in page.plain


def test_the_options_page_renders_a_row_per_option_from_the_code(site: Path, browser: Chromium):
    page = _rendered(browser, site / "options.html")
    assert page.headings[0] == "Options", page.headings
    rows = {row[0]: row[1:] for row in page.rows if len(row) == 4}
    assert rows.pop("option") == ["default", "coordinator", "meaning"]
    assert len(rows) == len(OPTION_DOCS), sorted(rows)
    for doc in OPTION_DOCS:
        shown = next(name for name in rows if name.split(".<")[0] == doc.name.removesuffix(".*"))
        assert rows[shown][:2] == [doc.default_shown, doc.coordinator], (doc.name, rows[shown])
        assert rows[shown][2] == " ".join(doc.meaning.replace("`", "").split()), (doc.name, rows[shown])
    assert rows["maxRecordsPerTrigger"][0] == "what the in-flight windows hold"


#: A word a reader would look for, and the page that explains it (the Arrow pool's allocator, on the deployment page)
SEARCH_WORD, SEARCH_PAGE = "jemalloc", "deployment.html"


@pytest.mark.parametrize("origin", ["file", "http"])
def test_the_search_finds_a_page_by_a_word(site: Path, browser: Chromium, served: str, origin: str):
    """Type a word into the search box of the home page, opened from files or over HTTP, and see a result naming the
    page. The search runs in a Web Worker that loads the index first: the box is focused (which makes the worker
    answer once it is ready) and the test waits for that answer before it types: typed earlier, the words would race
    the index."""
    tab = browser.open((site / "index.html").as_uri() if origin == "file" else f"{served}index.html")
    try:
        box = "document.querySelector('.md-search__input')"
        meta = "document.querySelector('.md-search-result__meta').textContent.trim()"
        # focused again while no answer came: a focus before the theme's script listened for it is not seen
        ready = tab.wait_for(f"{meta} !== 'Initializing search' ? {meta} : ({box}.blur(), {box}.focus(), false)",
                             "the search index to load")
        assert ready == "Type to start searching"
        tab.type(SEARCH_WORD)
        assert tab.evaluate(f"{box}.value") == SEARCH_WORD
        # a result for the whole word (each key searches anew): the link highlights the word on the page it names
        found = tab.wait_for(
            "[...document.querySelectorAll('a.md-search-result__link')].map(a => new URL(a.href))"
            f".filter(url => url.pathname.endsWith('/{SEARCH_PAGE}') && url.searchParams.get('h') === '{SEARCH_WORD}')"
            ".map(url => url.href)", f"a search result on {SEARCH_PAGE} for {SEARCH_WORD!r}")
        assert re.fullmatch(r"\d+ matching documents?", tab.evaluate(meta)), tab.evaluate(meta)
        assert all(url.startswith(f"{origin}:") for url in found), found
    finally:
        tab.close()


def test_no_code_block_scrolls_sideways_at_a_laptops_width(site: Path, browser: Chromium):
    """Every code block of every page (the examples, the commands' output, the API's signatures) shows whole in a
    1280-pixel window: long lines wrap, nothing hides behind a horizontal scrollbar."""
    pages = sorted(path for path in site.rglob("*.html") if path.name != "404.html")
    assert len(pages) > 20, pages
    tab = browser.open(pages[0].as_uri())
    measured, cut = 0, []
    try:
        assert tab.evaluate("window.innerWidth") == WINDOW[0]
        for page in pages:
            tab.go(page.as_uri())
            blocks = tab.evaluate("[...document.querySelectorAll('pre > code')].map(code => "
                                  "[code.scrollWidth - code.clientWidth, code.textContent.split('\\n')[0]])")
            measured += len(blocks)
            cut += [f"{page.relative_to(site)}: {hidden} px hidden in the block starting {first[:80]!r}"
                    for hidden, first in blocks if hidden > 0]
    finally:
        tab.close()
    assert measured > 50, f"only {measured} code blocks found on {len(pages)} pages"
    assert not cut, "code blocks with a horizontal scrollbar at 1280 px:\n" + "\n".join(cut)


#: The public modules (their __all__) and the reference page of each
REFERENCE = {"sharegroup_source": "sharegroup_source.html", "sharegroup_source.admin": "admin.html",
             "sharegroup_source.sinks": "sinks.html", "sharegroup_source.errors": "errors.html"}


def _documented() -> dict[tuple[str, str], object]:
    """Every public function and class by (module whose page documents it, name): an exception on the errors page,
    whichever public module exports it too; anything else on its own module's page."""
    entries: dict[tuple[str, str], object] = {}
    for module in REFERENCE:
        for name in importlib.import_module(module).__all__:
            value = getattr(importlib.import_module(module), name)
            if isinstance(value, type) and issubclass(value, BaseException):
                entries["sharegroup_source.errors", name] = value
            elif callable(value):
                entries[module, name] = value
    return entries


def test_the_reference_shows_every_public_function_with_its_signature_and_docstring(site: Path, browser: Chromium):
    """A function or class of the public API has an entry on its module's reference page with a docstring and a
    signature naming its parameters in order; an exception has an entry with its docstring on the errors page."""
    entry = """(([module, name]) => {
        // by its anchor, or by the name its heading shows (DeltaShareConsumer is defined in an internal module)
        const heading = [...document.querySelectorAll('.doc-heading')].find(h => h.id === `${module}.${name}` ||
            h.textContent.replace('\u00b6', '').trim() === `${module}.${name}`);
        if (!heading) return null;
        const signature = heading.nextElementSibling;
        return {signature: signature?.classList.contains('doc-signature') ? signature.innerText : null,
                doc: heading.parentElement.querySelector('.doc-contents')?.innerText.trim() ?? ''};
    })"""
    documented = _documented()
    assert len(documented) > 30 and ("sharegroup_source", "acknowledge") in documented, sorted(documented)
    tab = browser.open((site / "index.html").as_uri())
    problems = []
    try:
        for module, page in REFERENCE.items():
            tab.go((site / "reference" / page).as_uri())
            for (owner, name), value in sorted(documented.items()):
                if owner != module:
                    continue
                shown = tab.evaluate(f"{entry}({[module, name]!r})")
                if shown is None or not shown["doc"]:
                    problems.append(f"{page}: {module}.{name} has no entry with a docstring")
                elif "module's docstring" in shown["doc"] and value.__module__ != module:
                    problems.append(f"{page}: {module}.{name} sends its reader to the docstring of {value.__module__}, "
                                    "which no page shows")
                elif not (isinstance(value, type) and issubclass(value, BaseException)):
                    problem = _signature_problem(name, inspect.signature(value), shown["signature"] or "")
                    if problem:
                        problems.append(f"{page}: {module}.{name}: {problem}")
    finally:
        tab.close()
    assert not problems, "\n".join(problems)


def _signature_problem(name: str, signature: inspect.Signature, shown: str) -> str | None:
    """Why ``shown`` (a signature as the page shows it) is not ``name`` with ``signature``'s parameters, or None."""
    text = " ".join(shown.split())
    if not text.startswith(f"{name}("):
        return f"the signature shown does not start with {name}(: {text!r}"
    at = 0
    for parameter in signature.parameters:
        found = re.compile(rf"(?<![\w.]){re.escape(parameter)}\s*[:=,)]").search(text, at)
        if found is None:
            return f"parameter {parameter!r} missing or out of order in {text!r}"
        at = found.end()
    return None


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
