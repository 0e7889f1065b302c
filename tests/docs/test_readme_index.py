"""README's "Next, by what you came to do" table is the docs index: it links every page of docs/
(a new page is listed there or fails here), and each link resolves."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_index_links_every_docs_page() -> None:
    readme = (ROOT / "README.md").read_text()
    index = readme.split("**Next, by what you came to do**", 1)[1].split("\n## ", 1)[0]
    links = re.findall(r"\]\(([^)#]+)\)", index)
    assert all((ROOT / link).is_file() for link in links), links
    pages = {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")}
    assert pages <= set(links), sorted(pages - set(links))
