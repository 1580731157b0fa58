"""MkDocs hooks of the attndyn site (`hooks:` in mkdocs.yml).

- The committed figures live in the repository's ``figures/`` folder (the experiments write
  them there and the README shows them); the site serves them as ``figures/<name>`` without
  copying them into ``docs/``.
- attndyn's docstrings use reST roles (``:class:`X```, ``:func:`f```) that Markdown leaves
  as ``:class:<code>X</code>``; the role prefix is dropped so the name reads as code.
"""

import re
from pathlib import Path

from mkdocs.structure.files import File, Files

FIGURES = Path(__file__).resolve().parents[1] / "figures"
ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|obj|exc):(<code>)~?")


def on_files(files: Files, config) -> Files:
    for path in sorted(FIGURES.glob("*.png")):
        files.append(File.generated(config, f"figures/{path.name}", abs_src_path=str(path)))
    return files


def on_page_content(html: str, **kwargs) -> str:
    return ROLE.sub(r"\1", html)
