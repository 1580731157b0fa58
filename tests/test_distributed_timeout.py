"""A multi-host start that cannot complete ends in bounded time with one line: a coordinator
that never answers, a process 0 whose peers never join, a process 0 whose port is taken.
JAX's own behaviour was a silent wait of 300 s and then a C++ abort with a stack trace."""

import os
import socket
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

import attndyn as ad
from attndyn._io.distributed import ENV_COORDINATOR_TIMEOUT
from attndyn.cli import main
from tests.helpers import run_untyped

PHASE = ["phase-diagram", "--beta", "1", "--dim", "4", "--n-trajectories", "8"]
PHASE += ["--horizon", "1", "--no-progress"]
MULTI_HOST_ARGS = ["--coordinator", "127.0.0.1:9", "--process-count", "2", "--process-id", "1"]
MULTI_HOST = (
    "ATTNDYN_COORDINATOR",
    "ATTNDYN_PROCESS_COUNT",
    "ATTNDYN_PROCESS_ID",
    ENV_COORDINATOR_TIMEOUT,
)


@pytest.fixture(autouse=True)
def no_multi_host_variables(monkeypatch):
    for name in MULTI_HOST:
        monkeypatch.delenv(name, raising=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the timeout's own checks (before any connection) -----------------------------------


@pytest.mark.parametrize("timeout", [0, -5, True])
def test_a_timeout_that_is_not_positive_seconds_is_refused(timeout):
    with pytest.raises(ad.ParameterError, match=r"initialization_timeout=.* must be a whole"):
        ad.initialize_distributed("127.0.0.1:9", 2, 1, timeout)


def test_a_timeout_of_the_wrong_kind_is_refused_without_the_type_checker():
    # A user's process has no runtime type checker: attndyn's own check names the kind.
    code = (
        "import attndyn as ad\n"
        "for t in (2.5, '5'):\n"
        "    try:\n"
        "        ad.initialize_distributed('127.0.0.1:9', 2, 1, t)\n"
        "    except ad.ParameterError as error:\n"
        "        print(error)\n"
    )
    lines = run_untyped(code).strip().splitlines()
    assert [line.split(" must ")[0] for line in lines] == [
        "initialization_timeout=2.5",
        "initialization_timeout='5'",
    ]


def test_a_timeout_without_a_coordinator_is_refused(monkeypatch):
    with pytest.raises(ad.ParameterError, match=r"initialization_timeout=5 .*needs a coord"):
        ad.initialize_distributed(initialization_timeout=5)
    monkeypatch.setenv(ENV_COORDINATOR_TIMEOUT, "7")
    with pytest.raises(ad.ParameterError, match=r"initialization_timeout=7 .*needs a coord"):
        ad.initialize_distributed()


@pytest.mark.parametrize(
    ("value", "needle"),
    [("", f"{ENV_COORDINATOR_TIMEOUT} is set but empty"), ("soon", "is not an integer")],
)
def test_a_malformed_timeout_variable_is_refused(monkeypatch, value, needle):
    monkeypatch.setenv(ENV_COORDINATOR_TIMEOUT, value)
    with pytest.raises(ad.ParameterError, match=needle) as error:
        ad.initialize_distributed("127.0.0.1:9", 2, 1)
    assert "--coordinator-timeout" in str(error.value)


@pytest.mark.parametrize(
    "args",
    [
        ["--coordinator-timeout", "5"],
        [*MULTI_HOST_ARGS, "--coordinator-timeout", "0"],
    ],
)
def test_the_cli_refuses_a_timeout_it_cannot_use_with_status_2(tmp_path, args):
    out = tmp_path / "out"
    result = CliRunner().invoke(main, [*PHASE, *args, "--out", str(out)])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert "--coordinator-timeout" in lines[0]
    assert not out.exists()


def test_an_unreachable_coordinator_raises_in_the_api():
    coordinator = f"127.0.0.1:{_free_port()}"
    started = time.monotonic()
    with pytest.raises(ad.DistributedError, match=f"no coordinator answered at {coordinator}"):
        ad.initialize_distributed(coordinator, 2, 1, 1)
    assert time.monotonic() - started < 10


# --- the command line, in a child process ------------------------------------------------


def _start(pid: int, port: int, tmp_path, count: int = 2) -> tuple[int, list[str], float]:
    """Run phase-diagram as process ``pid`` of ``count`` with a 3 s timeout; its status,
    stderr lines and seconds."""
    env = {k: v for k, v in os.environ.items() if k not in MULTI_HOST and k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    args = ["--coordinator", f"127.0.0.1:{port}", "--process-count", str(count)]
    args += ["--process-id", str(pid), "--coordinator-timeout", "3"]
    cli = [sys.executable, "-c", "from attndyn.cli import main; main()"]
    started = time.monotonic()
    child = subprocess.run(
        [*cli, *PHASE, *args, "--out", str(tmp_path / f"p{pid}")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return child.returncode, child.stderr.strip().splitlines(), time.monotonic() - started


def _waited_then_failed(status: int, lines: list[str], port: int, needle: str) -> None:
    """Status 1, the waiting line, then one error line naming the coordinator."""
    assert status == 1, lines
    assert len(lines) == 2, lines
    waiting, error = lines
    assert waiting.startswith(f"waiting up to 3 s for the coordinator at 127.0.0.1:{port}")
    assert error.startswith(f"Error: {needle}"), error
    assert f"127.0.0.1:{port}" in error


def test_a_coordinator_that_never_answers_ends_in_one_line(tmp_path):
    port = _free_port()
    status, lines, seconds = _start(1, port, tmp_path)
    _waited_then_failed(status, lines, port, f"no coordinator answered at 127.0.0.1:{port}")
    assert "Connection refused" in lines[1] and "process 0" in lines[1]
    assert "--coordinator-timeout" in lines[1]
    assert not (tmp_path / "p1").exists()
    print(f"process 1: {seconds:.1f} s")


@pytest.mark.slow  # a child process each; the unanswered coordinator is the smoke
def test_process_0_without_its_peers_ends_in_one_line(tmp_path):
    # Process 0 serves the coordinator; process 1 never comes. JAX aborted it (status
    # 134, a C++ stack trace) after its timeout: now status 1 and one line.
    port = _free_port()
    status, lines, seconds = _start(0, port, tmp_path)
    _waited_then_failed(status, lines, port, "not all 2 processes joined the coordinator")
    assert "this is process 0" in lines[1] and "--coordinator-timeout" in lines[1]
    print(f"process 0: {seconds:.1f} s")


@pytest.mark.slow  # a child process each; the unanswered coordinator is the smoke
def test_process_0_on_a_port_in_use_ends_in_one_line(tmp_path):
    # gRPC crashed with a segmentation fault when the coordinator's port was taken.
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        status, lines, _ = _start(0, port, tmp_path)
    _waited_then_failed(status, lines, port, "process 0 cannot serve the coordinator")
    assert f"port {port} of this host cannot be opened (Address already in use)" in lines[1]
