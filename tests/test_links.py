"""Every link and image of the README and docs/ works where the forge shows them: as paths
relative to each Markdown file, inside the repository, to files that exist, and to
headings that exist (GitHub's anchors). The site build (tests/test_docs.py) checks the
same pages as MkDocs serves them, so a link that passes both works in both places.

External links (http, https, mailto) are not fetched: the tests run offline.
"""

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^[ \t]*(```|~~~).*?^[ \t]*\1[ \t]*$", re.MULTILINE | re.DOTALL)
CODE = re.compile(r"`+[^`\n]*`+")
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
DEFINITION = re.compile(r"^[ \t]*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.MULTILINE)
HTML = re.compile(r"<(?:a|img)\b[^>]*\b(?:href|src)=\"([^\"]+)\"", re.IGNORECASE)
HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$", re.MULTILINE)
EXPLICIT_ID = re.compile(r"\{[^}]*#([\w-]+)[^}]*\}|<a\s+(?:name|id)=\"([^\"]+)\"")


def prose(text: str) -> str:
    """``text`` without fenced blocks and inline code (links there are examples)."""
    return CODE.sub("", FENCE.sub("", text))


def targets(page: Path) -> list[str]:
    text = prose(page.read_text())
    return [*INLINE.findall(text), *DEFINITION.findall(text), *HTML.findall(text)]


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text without Markdown, lower case, without
    punctuation (letters of any script, digits, spaces, hyphens and underscores stay),
    spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = re.sub(r"\{[^}]*\}\s*$", "", text)  # attribute lists
    text = text.replace("`", "").replace("*", "").lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return kept.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = prose(page.read_text())
    found: set[str] = set()
    for _, heading in HEADING.findall(text):
        slug = github_slug(heading)
        n = 0
        while (slug if n == 0 else f"{slug}-{n}") in found:
            n += 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    for a, b in EXPLICIT_ID.findall(text):
        found.add(a or b)
    return found


def problems(page: Path) -> list[str]:
    out = []
    for target in targets(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
            continue  # http, https, mailto: external, not fetched offline
        if page.name == "spec.md" and re.fullmatch(r"[A-Za-z]", target):
            continue  # v[μ](x): mathematics in the verbatim specification (docs/hooks.py)
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        where = f"{page.relative_to(ROOT)}: {target}"
        if not file.is_relative_to(ROOT):
            out.append(f"{where} points outside the repository")
        elif not file.exists():
            out.append(f"{where} does not exist")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            out.append(f"{where}: no heading #{anchor} in {file.relative_to(ROOT)}")
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_work_on_the_forge(page):
    assert not problems(page)


def test_the_checker_finds_broken_links(tmp_path, monkeypatch):
    # A link checker must be able to fail: a missing file, a path out of the repository,
    # a missing heading; a good link and an external one pass.
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    (tmp_path / "b.md").write_text("# A β heading\n\ntext\n")
    page = tmp_path / "a.md"
    page.write_text(
        "[ok](b.md#a-β-heading) [gone](c.md) ![img](fig.png) [out](../x.md) "
        "[no](b.md#nope) [web](https://example.org) `[code](x.md)`\n"
    )
    found = problems(page)
    assert len(found) == 4, found
    assert any("c.md does not exist" in f for f in found)
    assert any("outside the repository" in f for f in found)
    assert any("no heading #nope" in f for f in found)


PLACEHOLDER = re.compile(r"^[ \t]*[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+[ \t]*$", re.MULTILINE)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_holds_a_placeholder(page):
    # A line that is one SHOUTED_NAME (outside code) is text meant to be written later:
    # the many-tokens guide shipped two (LONG_CONTEXT_SECTION, PERFORMANCE_SUMMARY).
    assert PLACEHOLDER.findall(prose(page.read_text())) == []
