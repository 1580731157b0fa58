"""What a run will cost, said once its first tile has run, and where a resumed run starts.

The first tile of a run is timed without the compilation inside it (its programs compile
on first use: :func:`.runtime.compile_seconds`), and the trajectories left are projected
at that rate: a study of five tokens runs at about a twentieth of the speed of one of two
(issue 42: 60–130 against ~2,000 trajectories/s on a 2-core CPU), which the bar's own
estimate shows only after minutes. Points of other sizes (N, d, layers) run at other
rates, so the note names the point it timed.
"""

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._io.runtime import compile_seconds


def duration(seconds: float) -> str:
    """``seconds`` in words a person reads at a glance (``2 h 05 min``, ``3 min 20 s``)."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.2g} s" if seconds < 10 else f"{seconds:.0f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


class FirstTile:
    """Times the first tile of a run (:meth:`start` before it, :meth:`note` after it) and
    says what the rest will cost, once."""

    def __init__(self) -> None:
        self.started: float | None = None
        self.compiled = 0.0
        self.said = False

    def start(self) -> None:
        if self.started is None and not self.said:
            self.started = time.perf_counter()
            self.compiled = compile_seconds()

    def note(self, ran: int, left: int, point: Mapping[str, Any]) -> str | None:
        """The line to show after the first tile (``ran`` trajectories; ``left`` still to
        run after it, in this process), or ``None`` if it was said already."""
        if self.started is None or self.said:
            return None
        self.said = True
        seconds = time.perf_counter() - self.started - (compile_seconds() - self.compiled)
        rate = ran / max(seconds, 1e-6)
        text = (
            f"attndyn: {rate:,.0f} trajectories/s on the first tile ({ran:,} at {dict(point)}, "
            "compilation apart)"
        )
        if left <= 0:
            return text + "."
        return (
            f"{text}: the {left:,} left take about {duration(left / rate)} at that rate "
            "(points of other sizes run at other rates)."
        )


def resuming(checkpoint: Path, done: int, total: int) -> str:
    """The line a run resumed from ``checkpoint`` shows first."""
    return (
        f"attndyn: resuming from {checkpoint}: {done:,} of {total:,} trajectories done "
        "before (the numbers are those of an uninterrupted run)."
    )
