"""mkdocs hook: the options page's table, generated at build time from ``sharegroup_source.option_names.OPTION_DOCS``.

docs/options.md holds the page's prose and a marker line; the build puts the table where the marker is, so
the page and the parser read one list of options and cannot drift. A page without the marker fails the build.
"""

from __future__ import annotations

from typing import Any

from mkdocs.exceptions import PluginError

from sharegroup_source.kafka.settings import RESERVED
from sharegroup_source.option_names import LEGACY_GROUP_SETTINGS, OPTION_DOCS, OptionDoc

PAGE = "options.md"
#: what follows a family's prefix: kafka.<setting>, groupConfig.<config>, stateStorage.<key>
_PLACEHOLDER = {"kafka": "<setting>", "groupConfig": "<config>"}
MARKER = "<!-- options: generated from sharegroup_source/option_names.py (OPTION_DOCS) by docs/hooks -->"


def anchor(doc: OptionDoc) -> str:
    """The option's anchor on the page: its name without a family's ``.*`` (options.md#maxRecordsPerTrigger)."""
    return doc.name.removesuffix(".*")


def options_table() -> str:
    """The options as Markdown: one row per option, then the spellings kept from earlier releases."""
    rows = ["| option | default | coordinator | meaning |", "|---|---|---|---|"]
    for doc in OPTION_DOCS:
        name = f"{anchor(doc)}.{_PLACEHOLDER.get(anchor(doc), '<key>')}" if doc.name.endswith(".*") else doc.name
        rows.append(f'| <a id="{anchor(doc)}"></a>`{name}` | {doc.default_shown} | {doc.coordinator} | {doc.meaning} |')
    legacy = ", ".join(f"`{name}`" for name in LEGACY_GROUP_SETTINGS)
    reserved = ", ".join(f"`kafka.{name}`" for name in sorted(RESERVED))
    return "\n".join([
        *rows, "",
        f"With `coordinator=delta`, {legacy} are still taken as the earlier spelling of `groupConfig.<config>`; "
        "with `coordinator=broker` they are refused, naming the new spelling.", "",
        f"The source manages {reserved} itself: setting one fails at `load()`.",
    ])


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise PluginError(f"docs/{PAGE} has lost its marker line, where the options table goes: {MARKER}")
    return markdown.replace(MARKER, options_table())
