"""MkDocs hooks of the attndyn site (`hooks:` in mkdocs.yml).

- The committed figures live in the repository's ``figures/`` folder (the experiments write
  them there). The pages link them as the forge reads them, relative to each page's file
  (``../figures/x.png`` from ``docs/index.md``, ``../../figures/x.png`` from
  ``docs/examples/``); the site serves the same files as ``figures/<name>`` and each such
  link is rewritten to that copy, so one link works in both places.
- Formulas are written as TeX between dollars (``$\\beta_c(d)$``, ``$$...$$``), which the
  forge renders itself; pymdownx.arithmatex finds them and this hook turns each into
  MathML (latex2mathml) when the site is built: browsers draw MathML natively, so the
  site renders its formulas with no script and no network.
- Docstrings (the API reference), the changelog and the specification write exponents
  and indices as plain text, ``e^{−2β}``, ``S^{d−1}``; outside code and formulas the site
  shows them as superscripts and subscripts instead of braces.
- attndyn's docstrings use reST roles (``:class:`X```, ``:func:`f```) that Markdown leaves
  as ``:class:<code>X</code>``; the role prefix is dropped so the name reads as code.
"""

import html
import os
import re
from pathlib import Path, PurePosixPath

from latex2mathml.converter import convert
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "figures"
ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|obj|exc):(<code>)~?")
#: A Markdown link or image target: ``](target)`` (no spaces in our targets).
LINK = re.compile(r"(\]\()([^)\s]+)(\))")
#: What pymdownx.arithmatex (generic mode) leaves for each formula.
MATH = re.compile(
    r'<(?P<tag>span|div) class="arithmatex">(?:\\\(|\\\[)(?P<tex>.*?)(?:\\\)|\\\])</(?P=tag)>',
    re.DOTALL,
)


def on_files(files: Files, config) -> Files:
    for path in sorted(FIGURES.glob("*.png")):
        files.append(File.generated(config, f"figures/{path.name}", abs_src_path=str(path)))
    return files


def site_link(target: str, page_src: str, docs_dir: Path) -> str:
    """``target`` as the site must see it: a link from the page ``page_src`` (its path in
    docs/) into the repository's ``figures/`` becomes a link to the site's copy."""
    if re.match(r"^[a-z]+:|^#|^/", target):
        return target
    path, _, anchor = target.partition("#")
    resolved = (docs_dir / PurePosixPath(page_src).parent / path).resolve()
    if resolved.parent != FIGURES:
        return target
    page_dir = (docs_dir / PurePosixPath(page_src).parent).resolve()
    link = os.path.relpath(docs_dir.resolve() / "figures" / resolved.name, page_dir)
    return PurePosixPath(link).as_posix() + (f"#{anchor}" if anchor else "")


#: In the specification (a verbatim copy of the shared one) ``v[μ](x)`` is a function of a
#: measure applied at a point, which Markdown would read as a link to ``x``: a one-letter
#: target after a bracket is mathematics there, and its bracket is escaped.
MATH_APPLICATION = re.compile(r"\[([^\]\n]*)\]\(([A-Za-z])\)")


def on_page_markdown(markdown: str, page, config, files) -> str:
    docs_dir = Path(config["docs_dir"])
    src = page.file.src_uri
    if src == "spec.md":
        markdown = MATH_APPLICATION.sub(r"\\[\1](\2)", markdown)
    return LINK.sub(lambda m: m[1] + site_link(m[2], src, docs_dir) + m[3], markdown)


def mathml(match: re.Match) -> str:
    """One arithmatex formula as MathML (block formulas displayed)."""
    display = "block" if match["tag"] == "div" else "inline"
    return convert(html.unescape(match["tex"]).strip(), display=display)


#: A figure caption: raw HTML, which Markdown (and so arithmatex) leaves alone.
CAPTION = re.compile(r"<figcaption>(.*?)</figcaption>", re.DOTALL)
DOLLARS = re.compile(r"\$([^$\s][^$]*?)\$")


def caption_math(match: re.Match) -> str:
    body = DOLLARS.sub(lambda m: convert(html.unescape(m[1]), display="inline"), match[1])
    return f"<figcaption>{body}</figcaption>"


#: Plain-text exponents and indices: ``^{…}``, ``_{…}`` (no nested braces).
SCRIPTS = re.compile(r"([\^_])\{([^{}<>]*)\}")
#: HTML tags, and the elements whose text is left alone.
TAG = re.compile(r"(<[^>]+>)")
VERBATIM = ("code", "pre", "math", "script", "style", "kbd")


def _script(match: re.Match) -> str:
    tag = "sup" if match[1] == "^" else "sub"
    return f"<{tag}>{match[2]}</{tag}>"


def scripts(html_text: str) -> str:
    """``x^{a}`` and ``x_{a}`` in the text (not in code or formulas) as ``x<sup>a</sup>``
    and ``x<sub>a</sub>``."""
    out, depth = [], 0
    for part in TAG.split(html_text):
        if part.startswith("<"):
            name = re.match(r"</?\s*([a-zA-Z0-9]+)", part)
            if name and name[1].lower() in VERBATIM and not part.endswith("/>"):
                depth += -1 if part.startswith("</") else 1
            out.append(part)
        elif depth > 0:
            out.append(part)
        else:
            out.append(SCRIPTS.sub(_script, part))
    return "".join(out)


def on_page_content(html_text: str, **kwargs) -> str:
    html_text = CAPTION.sub(caption_math, ROLE.sub(r"\1", html_text))
    return scripts(MATH.sub(mathml, html_text))
