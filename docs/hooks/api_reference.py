"""mkdocs hook: the API reference's docstrings use Sphinx's cross-reference roles (:class:`X`, :mod:`.y`), which
mkdocstrings renders as the role's name before the code; the reference pages show the code alone."""

from __future__ import annotations

import re
from typing import Any

ROLE = re.compile(r":(?:class|mod|func|meth|attr|exc|data|obj|py:\w+):(?=<code>)")


def on_page_content(html: str, page: Any, **_: Any) -> str:
    if not page.file.src_uri.startswith("reference/"):
        return html
    return ROLE.sub("", html)
