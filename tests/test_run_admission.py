"""Issue 38: the dashboard's runs are admitted against one memory budget per server (app.services.run_admission): a run
that does not fit beside the runs in progress waits in a visible queue (its phase says so, Stop ends it with
nothing fitted), never starts past the budget; small runs run side by side. Counted, never timed: the runs'
work is a stand-in that blocks until the test lets it end."""

from __future__ import annotations

import threading

import numpy as np
import pandas as pd
import pytest

import app.services.jobs as jobs
from app.services import run_admission
from app.services.jobs import FitJob
from app.services.run_admission import RunAdmission, run_bytes
from app.services.runner import BaseSpec, FitSettings, LabelSpec, SplitSpec

MB = 10**6


def _until(cond) -> None:
    """Wait for ``cond()`` (another thread's step): polled, bounded so that a broken queue fails, not hangs."""
    for _ in range(60_000):
        if cond():
            return
        threading.Event().wait(0.01)
    raise AssertionError("the other thread never got there")


def test_a_run_that_does_not_fit_waits_for_the_one_in_progress():
    adm = RunAdmission(budget=lambda: 100 * MB)
    said, waiting, got = [], threading.Event(), []
    assert adm.acquire("a", 70 * MB, lambda: False, said.append)

    def say(text):
        said.append(text)
        waiting.set()

    t = threading.Thread(target=lambda: got.append(adm.acquire("b", 70 * MB, lambda: False, say)))
    t.start()
    assert waiting.wait(60)
    assert adm.held() == (70 * MB, 1) and adm.queued() == 1 and not got
    assert "waiting for another analyst's run to finish" in said[0] and "hold 70 MB of 100 MB" in said[0]
    adm.release("a")
    t.join(60)
    assert got == [True] and adm.held() == (70 * MB, 1) and (adm.admitted, adm.waited) == (2, 1)
    adm.release("b")
    assert adm.held() == (0, 0)


def test_small_runs_run_side_by_side_and_a_large_one_runs_alone():
    adm = RunAdmission(budget=lambda: 100 * MB)
    never = lambda: False  # noqa: E731
    assert adm.acquire("a", 30 * MB, never, lambda t: None) and adm.acquire("b", 30 * MB, never, lambda t: None)
    assert adm.waited == 0 and adm.held() == (60 * MB, 2)
    adm.release("a")
    adm.release("b")
    assert adm.acquire("big", 5000 * MB, never, lambda t: None)  # over the budget: alone, as the whole budget
    assert adm.held() == (100 * MB, 1)
    stop = threading.Event()
    said = []
    t = threading.Thread(target=lambda: said.append(adm.acquire("c", 1 * MB, stop.is_set, said.append)))
    t.start()
    _until(lambda: adm.queued() == 1)  # the second run is in the queue (no timing: the queue's own count)
    stop.set()
    adm.wake()
    t.join(60)
    assert said[-1] is False and adm.held() == (100 * MB, 1) and adm.queued() == 0


def test_queue_is_first_come_first_served():
    """A small run queued after a large one does not overtake it (the large one would wait forever)."""
    adm = RunAdmission(budget=lambda: 100 * MB)
    never = lambda: False  # noqa: E731
    assert adm.acquire("a", 60 * MB, never, lambda t: None)
    order, queued = [], []

    def later(key, need):
        ev = threading.Event()
        queued.append(ev)
        adm.acquire(key, need, never, lambda t: ev.set())
        order.append(key)

    t1 = threading.Thread(target=later, args=("large", 90 * MB))
    t1.start()
    _until(lambda: adm.queued() >= 1)
    t2 = threading.Thread(target=later, args=("small", 20 * MB))
    t2.start()
    _until(lambda: adm.queued() >= 2)
    assert order == []  # "small" (60 + 20 <= 100) waits behind "large"
    adm.release("a")
    t1.join(60)
    assert order == ["large"]
    adm.release("large")
    t2.join(60)
    assert order == ["large", "small"]


@pytest.fixture
def blocking_runs(monkeypatch):
    """FitJobs whose pipeline blocks until released; a fresh admission with a budget each run fills alone."""
    adm = RunAdmission(budget=lambda: 400 * MB)
    monkeypatch.setattr(run_admission, "RUNS", adm)
    calls, gates = [], {}

    def fake_pipeline(df, *args, phase=None, **kw):
        key = df.attrs["key"]
        calls.append(key)
        phase(f"fitting {key}")
        gates[key].wait(120)
        raise jobs.StoppedByUser("ended by the test")

    monkeypatch.setattr(jobs, "run_pipeline", fake_pipeline)

    def make(key, rows=2_000_000):
        df = pd.DataFrame({"x": np.zeros(rows)})
        df.attrs["key"] = key
        gates[key] = threading.Event()
        job = FitJob(df, LabelSpec("x"), BaseSpec(), SplitSpec(), [], FitSettings(), worker="thread")
        phases = []
        waiting = threading.Event()

        def set_phase(text, job=job):
            phases.append(text)
            if text.startswith("waiting for another analyst"):
                waiting.set()
            job.phase = text

        job._set_phase = set_phase
        return job, phases, waiting

    return adm, calls, gates, make


def test_a_second_fitjob_waits_in_the_queue_then_runs(blocking_runs):
    adm, calls, gates, make = blocking_runs
    first, _, _ = make("first")
    second, phases, waiting = make("second")
    assert first.need_bytes > 400 * MB  # 2M rows: each run is the whole budget
    first.start()
    second.start()
    assert waiting.wait(60)
    assert second.running and second.phase.startswith("waiting for another analyst's run to finish")
    assert calls == ["first"] and adm.held()[1] == 1  # never started past the budget
    gates["first"].set()
    assert first.wait(60) and first.status == "stopped"
    gates["second"].set()
    assert second.wait(60) and calls == ["first", "second"]
    assert (adm.admitted, adm.waited) == (2, 1) and adm.held() == (0, 0)
    assert phases[0].startswith("waiting") and "fitting second" in phases


def test_stop_while_waiting_ends_the_run_with_nothing_fitted(blocking_runs):
    adm, calls, gates, make = blocking_runs
    first, _, _ = make("first")
    second, _, waiting = make("second")
    first.start()
    second.start()
    assert waiting.wait(60)
    second.stop()
    assert second.wait(60) and second.status == "stopped"
    assert "waiting for another analyst" in second.error and "nothing was fitted" in second.kept
    assert second.stop_seen() and calls == ["first"] and adm.queued() == 0
    gates["first"].set()
    assert first.wait(60) and adm.held() == (0, 0) and (adm.admitted, adm.waited) == (1, 0)


def test_two_small_runs_run_side_by_side(blocking_runs):
    adm, calls, gates, make = blocking_runs
    a, _, _ = make("a", rows=100)
    b, _, _ = make("b", rows=100)
    assert a.need_bytes < 200 * MB
    a.start()
    b.start()
    _until(lambda: len(calls) == 2)  # both in their pipelines at once
    assert adm.held()[1] == 2 and adm.waited == 0
    gates["a"].set()
    gates["b"].set()
    assert a.wait(60) and b.wait(60) and adm.held() == (0, 0)


def test_run_estimate_grows_with_rows_groups_and_moments():
    base = run_bytes(8 * 10_000, 10_000, 5, 2)
    assert run_bytes(8 * 100_000, 100_000, 5, 2) > base
    assert run_bytes(8 * 10_000, 10_000, 50, 2) > base
    assert run_bytes(8 * 10_000, 10_000, 5, 4) > base
    # pairs count at most the audit's limit (the run refuses more)
    from app.services import io as table_io

    assert run_bytes(0, 5_000_000, 10_000, 1) < run_admission.RUN_BASE_BYTES + 2 * table_io.AUDIT_WORK_BYTES


def test_a_discovery_waits_for_a_run_and_stop_ends_it(blocking_runs, monkeypatch):
    """The dashboard's other background work, the search for groups (app.services.discovery.DiscoverJob), reserves from
    the same budget: it waits behind a run that fills it, says so, and Stop ends it with nothing kept."""
    import app.services.discovery as discovery

    adm, calls, gates, make = blocking_runs
    searched = []
    monkeypatch.setattr(discovery, "run_discovery", lambda *a, **kw: searched.append(1))
    first, _, _ = make("first")
    first.start()
    _until(lambda: adm.held()[1] == 1)
    df = pd.DataFrame({"x": np.zeros(2_000_000)})
    search = discovery.DiscoverJob(df, LabelSpec("x"), BaseSpec(), SplitSpec(), None).start()
    _until(lambda: adm.queued() == 1)
    _until(lambda: search.phase.startswith("waiting for another analyst"))
    search.stop()
    assert search.wait(60) and search.status == "stopped" and "nothing was kept" in search.error
    assert searched == [] and adm.queued() == 0
    gates["first"].set()
    assert first.wait(60)
    again = discovery.DiscoverJob(df, LabelSpec("x"), BaseSpec(), SplitSpec(), None).start()
    assert again.wait(60) and again.status == "done" and searched == [1] and adm.held() == (0, 0)
