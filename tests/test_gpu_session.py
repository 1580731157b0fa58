"""The GPU session script (benchmarks/gpu_session.sh) runs only on a lent accelerator, a few
times a month: a flag one of its scripts no longer takes would be found there, in device
time. Every flag it passes must be one its script declares (argparse refuses the others;
0.5's rename of --tokens to --n-tokens broke its manytokens step unseen)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLAG = re.compile(r"(?<![\w-])--[a-z][\w-]*")


def _calls(text: str) -> list[tuple[str, str]]:
    """(script, arguments) of each Python script the session runs, ``bench`` lines as
    benchmarks/run.py's."""
    text = text.replace("\\\n", " ")
    calls = [
        (m.group(1), m.group(2))
        for m in re.finditer(r"python3 ((?:benchmarks|experiments)/\w+\.py)([^|;\n>]*)", text)
    ]
    calls += [
        ("benchmarks/run.py", m.group(1)) for m in re.finditer(r"\bbench \d+ ([^;\n]*)", text)
    ]
    return calls


def _declared(script: str) -> str:
    """The script's source, and its folder's shared parser (experiments/_common.py)."""
    path = ROOT / script
    shared = path.parent / "_common.py"
    return path.read_text() + (shared.read_text() if shared.exists() else "")


def test_the_gpu_session_passes_only_flags_its_scripts_take():
    calls = _calls((ROOT / "benchmarks" / "gpu_session.sh").read_text())
    assert len(calls) >= 8  # the steps' scripts were found
    for script, arguments in calls:
        source = _declared(script)
        for flag in FLAG.findall(arguments):
            assert f'"{flag}"' in source, f"{script} takes no {flag}"


def test_a_renamed_flag_is_caught():
    (script, arguments), *_ = _calls("python3 benchmarks/manytokens.py --tokens 4 --json\n")
    source = _declared(script)
    assert [f for f in FLAG.findall(arguments) if f'"{f}"' not in source] == ["--tokens"]
