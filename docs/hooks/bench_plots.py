"""mkdocs hook: the bench's plots (bench/results/*.png) on the benchmarks page, without copies under docs/.

docs/benchmarks.md links them where they are in the repository (../bench/results/NAME.png, which a reader of
the repository follows); the build serves each as bench-results/NAME.png and points the page's links there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

PAGE = "benchmarks.md"
SERVED = "bench-results"
IN_REPOSITORY = "../bench/results/"


def on_files(files: Files, config: Any) -> Files:
    results = Path(config["docs_dir"]).parent / "bench" / "results"
    for plot in sorted(results.glob("*.png")):
        files.append(File.generated(config, f"{SERVED}/{plot.name}", abs_src_path=str(plot)))
    return files


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    return markdown.replace(f"]({IN_REPOSITORY}", f"]({SERVED}/")
