"""The documentation cannot rot: its examples run, its commands parse, and the site builds.

- Every fenced ```python block of README.md and docs/ runs, in order, in one namespace per
  page, in a temporary working directory (so files the examples write go there). Blocks
  that must not run (paper-scale jobs, shell sessions) are ```bash or ```text.
- Every ``attndyn ...`` command in a ```bash block parses with the real click commands
  (option names, choices and types), and every ``experiments/*.py`` script it names exists
  and has the flags it is given.
- Every public name of attndyn, attndyn.theory, attndyn.studies and attndyn.plot has an
  entry in the API reference (docs/reference/).
- ``mkdocs build --strict`` succeeds (broken links, missing references and docstring
  warnings fail it), and the built pages load nothing from the network.
"""

import os
import re
import shlex
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
from click.testing import CliRunner

import attndyn
from attndyn.cli import main

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
    re.MULTILINE | re.DOTALL,
)
#: Info strings that would hold Python the runner does not run: use ```python, or ```text
#: for code that must not run.
UNRUN_PYTHON = {"py", "python3", "pycon", "ipython", "pyi"}


def blocks(page: Path, language: str) -> list[tuple[int, str]]:
    """``(line, code)`` of each fenced block of ``language`` in ``page``, dedented."""
    text = page.read_text()
    out = []
    for m in FENCE.finditer(text):
        if m["info"].strip().split(" ")[0] == language:
            line = text.count("\n", 0, m.start()) + 2
            out.append((line, textwrap.dedent(m["body"])))
    return out


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def small_main_job(cwd: Path) -> None:
    """``attndyn phase-diagram --out results`` at a tiny size, for the pages that read its
    output (the getting-started page): same command, same files, seconds instead of 30."""
    args = ["phase-diagram", "--out", "results", "--no-progress"]
    # The shape of the other pages' examples (d = 4, N = 2, L = 10, T = 5, 256 trajectories):
    # one compilation serves them all.
    small = ["--beta", "0.5,2", "--dim", "4", "--n-trajectories", "256", "--depth", "10"]
    result = CliRunner().invoke(main, [*args, *small, "--horizon", "5"])
    assert result.exit_code == 0, result.output
    assert (cwd / "results" / "phase_diagram.nc").exists()


def committed_figures(cwd: Path) -> None:
    """The committed figures' JSON, where the examples that re-analyse them look."""
    (cwd / "figures").symlink_to(ROOT / "figures")


#: What a page's examples expect to exist before they run.
SETUP = {
    "docs/getting-started.md": small_main_job,
    "docs/guides/many-tokens.md": committed_figures,
}

PYTHON_PAGES = [p for p in PAGES if blocks(p, "python")]


def test_every_page_with_python_is_collected():
    assert ROOT / "README.md" in PYTHON_PAGES
    assert len(PYTHON_PAGES) >= 5


@pytest.mark.default_case("docs/guides/estimating.md", "docs/guides/theory.md", "docs/results.md")
@pytest.mark.parametrize("page", PYTHON_PAGES, ids=page_id)
def test_python_examples_run(page: Path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    if page_id(page) in SETUP:
        SETUP[page_id(page)](tmp_path)
    namespace: dict = {"__name__": "__docs__"}
    for line, code in blocks(page, "python"):
        exec(compile(code, f"{page_id(page)}:{line}", "exec"), namespace)


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_no_python_hides_in_other_fences(page: Path):
    infos = {m["info"].strip().split(" ")[0] for m in FENCE.finditer(page.read_text())}
    assert not infos & UNRUN_PYTHON, "use ```python (runs in tests) or ```text (does not)"


def shell_commands(page: Path) -> list[tuple[int, list[str]]]:
    """Each simple command of each ```bash block, as argv, without leading VAR=value."""
    out = []
    for line, body in blocks(page, "bash"):
        joined = re.sub(r"\\\n", " ", body)
        for i, text in enumerate(joined.splitlines()):
            for part in re.split(r"&&|\|\||;|\||&", text.split(" #")[0]):
                argv = shlex.split(part, comments=True)
                while argv and re.fullmatch(r"[A-Z_]+=\S*", argv[0]):
                    argv = argv[1:]
                if argv:
                    out.append((line + i, argv))
    return out


COMMAND_PAGES = [p for p in PAGES if shell_commands(p)]


@pytest.mark.parametrize("page", COMMAND_PAGES, ids=page_id)
def test_shell_examples_parse(page: Path):
    for line, argv in shell_commands(page):
        where = f"{page_id(page)}:{line}: {shlex.join(argv)}"
        program = Path(argv[0]).name
        if program == "attndyn":
            command = main.commands.get(argv[1]) if len(argv) > 1 else None
            assert command is not None, f"{where}: no such attndyn command"
            # Parses and converts every option exactly as the real command would.
            command.make_context(argv[1], list(argv[2:]))
        elif program.startswith("python") and len(argv) > 1 and argv[1].endswith(".py"):
            check_script(where, argv[1], argv[2:])


def check_script(where: str, script: str, args: list[str]) -> None:
    path = ROOT / script
    assert path.exists(), f"{where}: {script} does not exist"
    source = path.read_text()
    if "from _common import" in source:
        source += (path.parent / "_common.py").read_text()
    for flag in (a.split("=")[0] for a in args if a.startswith("--")):
        assert f'"{flag}"' in source, f"{where}: {script} has no {flag} option"


def public_names(module: types.ModuleType) -> list[str]:
    return [
        name
        for name in dir(module)
        if not name.startswith("_")
        and name not in {"TYPE_CHECKING", "importlib"}
        and not isinstance(getattr(module, name), types.ModuleType)
    ]


def test_every_public_name_is_in_the_api_reference():
    reference = "".join(p.read_text() for p in (ROOT / "docs" / "reference").glob("*.md"))
    missing = [
        f"{module.__name__}.{name}"
        for module in (attndyn, attndyn.theory, attndyn.studies, attndyn.plot)
        for name in public_names(module)
        if f"::: {module.__name__}.{name}\n" not in reference
    ]
    assert not missing, f"add to docs/reference/*.md: {missing}"


def braces_in_text(html: str) -> list[str]:
    """The text of ``html`` (outside code, preformatted blocks and MathML) that still
    shows ``^{`` or ``_{``."""
    found, depth = [], 0
    for part in re.split(r"(<[^>]+>)", html):
        if part.startswith("<"):
            name = re.match(r"</?\s*([a-zA-Z0-9]+)", part)
            if name and name[1].lower() in ("code", "pre", "math", "script", "style"):
                depth += -1 if part.startswith("</") else 1
        elif depth == 0 and re.search(r"[\^_]\{", part):
            found.append(part.strip()[:80])
    return found


def test_site_builds_in_strict_mode_and_offline(tmp_path):
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert (site / "reference" / "cli" / "index.html").exists()
    assert (site / "figures" / "fig3_beta_d.png").exists()
    remote = re.compile(r"<(?:script|link|img)\b[^>]*\b(?:src|href)=\"(?:https?:)?//", re.I)
    image = re.compile(r"<img\b[^>]*\bsrc=\"([^\"]+)\"", re.I)
    for html in site.rglob("*.html"):
        text = html.read_text()
        hits = [m.group(0) for m in remote.finditer(text)]
        assert not hits, f"{html.relative_to(site)} loads from the network: {hits[:3]}"
        # Every image the pages show is in the site (the figures, linked as the forge
        # reads them, are rewritten to the site's copies by docs/hooks.py).
        for src in image.findall(text):
            if not src.startswith("data:"):
                assert (html.parent / src).resolve().exists(), f"{html.relative_to(site)}: {src}"
        # Every formula became MathML: none is left as TeX between dollars, and no
        # exponent shows its braces (e^{−β}) outside code.
        assert 'class="arithmatex"' not in text, html.relative_to(site)
        assert not braces_in_text(text), (html.relative_to(site), braces_in_text(text)[:3])
    theory = (site / "guides" / "theory" / "index.html").read_text()
    assert "<math" in theory and "<msqrt>" in theory  # ε_c(β) = √(2e^{−β})


def test_citation_file_is_valid_and_current():
    yaml = pytest.importorskip("yaml")
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    for key in ("cff-version", "message", "title", "authors"):
        assert cff.get(key), f"CITATION.cff needs {key!r}"
    assert str(cff["version"]) == attndyn.__version__


def test_the_specification_page_is_the_shared_specification():
    # docs/spec.md is a copy of the project's specification (shared/spec/models.md beside
    # the repository, where the forge's readers cannot follow a link): it must not drift.
    for shared in (ROOT.parent / "shared", ROOT.parent.parent / "shared"):
        spec = shared / "spec" / "models.md"
        if spec.exists():
            assert (ROOT / "docs" / "spec.md").read_text() == spec.read_text(), (
                f"copy {spec} to docs/spec.md"
            )
            return
    pytest.skip("no shared/spec/models.md beside this checkout")
