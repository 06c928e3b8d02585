"""Server-wide admission of the dashboard's runs (issue 38: peak memory under 2 GB on any file under 10 MB, in the
dashboard too). Uploads are admitted against the server's budget for tables (:mod:`app.ui.budget`), but a run
takes memory of its own, several times its table (the split, the base model, the membership of every row in
every group, the moments, the audit), in its worker process: two analysts' large runs started together could
pass the budget that each one alone keeps.

Every run therefore reserves its estimated memory (:func:`run_bytes`) from one budget per server process,
``MMC_SERVER_RUN_MB`` (default 1,000 MB), before it starts. A run that does not fit beside the runs in progress
waits, first come first served, in a visible queue ("waiting for another analyst's run to finish", with Stop);
a run whose estimate is the whole budget or more runs alone. Nothing is started past the budget, and nothing
waits for a run that has ended: a reservation is returned when its run ends, however it ends (done, stopped,
failed, its worker killed).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

RUN_DEFAULT_MB = 1000
RUN_BASE_BYTES = 150 * 10**6  # a worker process with numpy, pandas and scikit-learn imported
TABLE_COPIES = (
    3.1  # the table, its pickled copy in the worker and the split's (app.services.io: 3.1 x the table in fit)
)
MOMENT_ROW_BYTES = 4 * 8  # per row and moment: the prediction, its pseudo-label and two working copies
WAIT_POLL = 0.5  # seconds between two looks at Stop while waiting (Stop also wakes the queue at once)


def run_budget() -> int:
    """Bytes all runs of this server may reserve together (``MMC_SERVER_RUN_MB``)."""
    try:
        mb = float(os.environ.get("MMC_SERVER_RUN_MB", RUN_DEFAULT_MB))
    except ValueError:
        mb = RUN_DEFAULT_MB
    return int((mb if mb > 0 else RUN_DEFAULT_MB) * 10**6)


def run_bytes(table_bytes: int, rows: int, n_groups: int, n_moments: int) -> int:
    """The memory a run on ``rows`` rows (``table_bytes`` as a DataFrame) with ``n_groups`` groups and
    ``n_moments`` moments may take, from the measured costs of `mmc fit` and `mmc audit` (app.services.io): the worker,
    3.1 x the table, the audit's bytes a row and a (row, group) pair (every row counted in every group: an upper
    bound; the run refuses more pairs than the audit's limit, so they count at most that limit)."""
    from . import io as table_io

    rows, n_groups = max(int(rows), 0), max(int(n_groups), 1)
    pairs = table_io.AUDIT_PAIR_BYTES * rows * n_groups
    work = table_io.AUDIT_ROW_BYTES * rows + min(pairs, table_io.AUDIT_WORK_BYTES)
    return int(RUN_BASE_BYTES + TABLE_COPIES * max(int(table_bytes), 0) + work + MOMENT_ROW_BYTES * rows * n_moments)


def mb(n: float) -> str:
    return f"{n / 1e6:,.0f} MB"


class RunAdmission:
    """The runs of one server process: reservations in progress and a first-come-first-served queue.

    ``admitted`` counts the runs let in, ``waited`` those that had to wait first (the tests count them, not
    times)."""

    def __init__(self, budget: Callable[[], int] = run_budget):
        self._budget = budget
        self._cond = threading.Condition()
        self._running: dict[str, int] = {}
        self._queue: list[str] = []
        self.admitted = 0
        self.waited = 0

    def held(self) -> tuple[int, int]:
        """(bytes reserved, runs in progress)."""
        with self._cond:
            return sum(self._running.values()), len(self._running)

    def queued(self) -> int:
        with self._cond:
            return len(self._queue)

    def _fits(self, need: int) -> bool:
        return not self._running or sum(self._running.values()) + need <= self._budget()

    def acquire(self, key: str, need: int, stop: Callable[[], bool], say: Callable[[str], None]) -> bool:
        """Reserve ``need`` bytes (at most the whole budget: such a run runs alone) for the run ``key``; while it
        does not fit beside the runs in progress, or runs queued before it wait, say so through ``say`` and wait.
        False (nothing reserved) when ``stop()`` turns true first."""
        need = min(int(need), self._budget())
        with self._cond:
            self._queue.append(key)
            waited, said = False, ""
            try:
                while True:
                    if self._queue[0] == key and self._fits(need):
                        self._running[key] = need
                        self.admitted += 1
                        self.waited += waited
                        return True
                    if stop():
                        return False
                    waited = True
                    held, runs = sum(self._running.values()), len(self._running)
                    ahead = self._queue.index(key)
                    text = (
                        f"waiting for another analyst's run to finish: this run needs about {mb(need)} and the "
                        f"server's {runs} run(s) in progress hold {mb(held)} of {mb(self._budget())}"
                        + (f"; {ahead} run(s) waiting before it" if ahead else "")
                        + " (Stop cancels it)"
                    )
                    if text != said:
                        said = text
                        say(text)
                    self._cond.wait(WAIT_POLL)
            finally:
                self._queue.remove(key)
                self._cond.notify_all()

    def release(self, key: str) -> None:
        """Return the reservation of ``key`` (nothing when it holds none) and let the queue move."""
        with self._cond:
            self._running.pop(key, None)
            self._cond.notify_all()

    def wake(self) -> None:
        """Let the waiting runs look at their Stop flags now."""
        with self._cond:
            self._cond.notify_all()


RUNS = RunAdmission()  # the server's: every FitJob started in the background reserves from it
