"""The in-app base model: Stop is looked at between boosting chunks (counted, no clock), the chunked fit is the
same model as one plain scikit-learn fit (also when early stopping fires exactly at a chunk's end), and in the
dashboard's worker process, which Stop terminates, the model is fitted in one call and Stop ends the job at once."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import app.services.base_model as bm
from app.services.specs import BaseSpec, FitSettings, LabelSpec, SplitSpec


def _frame(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"a": rng.normal(size=n), "b": rng.normal(size=n), "c": rng.choice(list("xyz"), n)})
    df["y"] = np.sin(3 * df["a"]) + df["b"] ** 2 + (df["c"] == "x") + rng.normal(0, 1.0, n)
    return df


def _plain(X, y):
    from sklearn.ensemble import HistGradientBoostingRegressor

    return HistGradientBoostingRegressor(
        max_iter=200, learning_rate=0.08, early_stopping=True, validation_fraction=0.15, random_state=0
    ).fit(X, y)


def test_the_stop_flag_is_read_before_every_boosting_chunk():
    df = _frame()
    events = []

    def stop():
        events.append("stop?")
        return sum(e == "chunk" for e in events) >= 3

    with pytest.raises(bm.StoppedByUser):
        bm.fit_base_model(
            df[["a", "b", "c"]], df["y"].to_numpy(), "hgb", 0, stop=stop, progress=lambda it: events.append("chunk")
        )
    # one look before each chunk, none grown after the flag was seen
    assert events == ["stop?", "chunk"] * 3 + ["stop?"]


def test_chunked_fit_equals_one_fit_when_early_stopping_ends_a_chunk(monkeypatch):
    """Regression: a chunk ending exactly at the iteration where early stopping fires used to be followed by one
    more warm start, which grew one tree more than the plain fit (seen on 60,000 rows: 61 trees against 60)."""
    df = _frame()
    X, y = df[["a", "b"]], df["y"].to_numpy()
    ref = _plain(X, y)
    assert ref.n_iter_ < 200  # early stopping ended it
    for chunk in (ref.n_iter_, ref.n_iter_ // 2 if ref.n_iter_ % 2 == 0 else ref.n_iter_, 7):
        monkeypatch.setattr(bm, "BOOST_CHUNK", chunk)
        model = bm.fit_base_model(X, y, "hgb", 0, stop=lambda: False)
        assert model.named_steps["reg"].n_iter_ == ref.n_iter_, chunk
        assert np.array_equal(model.predict(X), ref.predict(X)), chunk


def test_in_a_killable_worker_the_model_is_fitted_in_one_call(monkeypatch):
    df = _frame()
    X, y = df[["a", "b"]], df["y"].to_numpy()
    monkeypatch.setattr(bm, "KILLABLE", True)
    looks, chunks = [], []
    model = bm.fit_base_model(X, y, "hgb", 0, stop=lambda: looks.append(1) or False, progress=chunks.append)
    assert looks == [] and len(chunks) == 1  # no warm starts: Stop terminates the process instead
    assert np.array_equal(model.predict(X), _plain(X, y).predict(X))


def test_stop_in_the_worker_process_during_the_base_model_fit_ends_the_job_at_once():
    import time

    from app.services.jobs import FitJob

    df = _frame(120_000, seed=1)
    job = FitJob(
        df,
        LabelSpec("y"),
        BaseSpec("model", None, "hgb", ("a", "b", "c")),
        SplitSpec(base=0.6, seed=3),
        {"format": "mmc-groups", "version": 1, "groups": []},
        FitSettings(n_boot=0),
        worker="process",
    ).start()
    deadline = time.time() + 120  # a generous wait for the fork server on a loaded machine, not an assertion
    while job.running and not job.phase.startswith("fitting the base model") and time.time() < deadline:
        time.sleep(0.05)
    assert job.phase.startswith("fitting the base model"), job.phase
    job.stop()
    # no waiting: the worker is terminated and the job is over when stop() returns
    assert job.status == "stopped" and not job.running and job.result is None
    assert "nothing was fitted" in job.kept
    job._proc.join(30)
    assert not job._proc.is_alive()


def test_a_base_model_fitted_in_a_worker_process_is_reused_by_the_next_run(monkeypatch):
    """Each run's worker process is forked from the fork server, which has none of the server's cache: the base
    model used to be fitted again for every run. Now the worker sends the predictions back, and the next worker
    starts with them (a planted prediction shows that it is used instead of a new fit)."""
    from app.services.jobs import FitJob

    monkeypatch.setattr(bm, "_BASE_CACHE", type(bm._BASE_CACHE)())
    df = _frame(4000, seed=2)
    args = (
        df,
        LabelSpec("y"),
        BaseSpec("model", None, "hgb", ("a", "b", "c")),
        SplitSpec(base=0.4, seed=5),
        {"format": "mmc-groups", "version": 1, "groups": []},
    )
    first = FitJob(*args, FitSettings(n_boot=0, max_rounds=2), data_key="t", worker="process").start()
    assert first.wait(300) and first.status == "done", first.error
    entries = bm.cache_entries("t")
    # the worker's fits, now in this process's cache: the base model and its base variance (its key has the
    # switch on the end, app.services.base_variance)
    assert len(entries) == 2 and entries[1][0] == (*entries[0][0], ("variance", True))
    key, pred = entries[0]
    assert np.array_equal(np.clip(pred, first.result.label.lo, first.result.label.hi), first.result.base)
    assert np.array_equal(entries[1][1], first.result.base_variance)
    planted = np.full_like(pred, float(np.median(pred)))
    bm.cache_put(key, planted)
    planted_v = np.full_like(pred, 2.0)
    bm.cache_put(entries[1][0], planted_v)
    second = FitJob(*args, FitSettings(n_boot=0, max_rounds=3), data_key="t", worker="process").start()
    assert second.wait(300) and second.status == "done", second.error
    assert np.array_equal(second.result.base, planted)  # no second fit
    assert np.array_equal(second.result.base_variance, planted_v)  # of either model
    assert bm.cache_entries("other table") == []


def _job(df, **kw):
    from app.services.jobs import FitJob

    return FitJob(
        df,
        LabelSpec("y"),
        BaseSpec("model", None, "hgb", ("a", "b", "c")),
        SplitSpec(base=0.4, seed=5),
        {"format": "mmc-groups", "version": 1, "groups": []},
        FitSettings(n_boot=0, max_rounds=2),
        worker="process",
        **kw,
    )


def test_a_worker_process_that_cannot_start_ends_the_job_with_an_error(monkeypatch):
    """Regression: FitJob.start set "running" before starting the process, so a start that raised left a job
    that ran forever (Run disabled) and whose stop() raised AttributeError (terminate() on a process never
    started), which broke every later upload in the session."""
    import multiprocessing.process

    def refuse(self):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", refuse)
    job = _job(_frame(500)).start()  # started once the server's run budget admits it (app.services.run_admission)
    assert job.wait(60) and job.status == "error" and not job.running
    assert "could not start the fitting process" in job.error and "BrokenPipeError" in job.error
    job.stop()  # a later upload or Run stops the old job: no error
    assert job.status == "error"


def test_job_children_do_not_run_the_dashboard_script(monkeypatch, tmp_path):
    """While a Streamlit page runs, __main__ is app/dashboard.py and app/ is first on sys.path: every job child
    used to execute the whole script as __mp_main__ (importing Streamlit and every page) with app/io.py (now app/services/io.py)
    shadowing the standard library's io. The preparation data the child starts from now has neither (a main
    module outside app/ keeps the standard behaviour), and a job started in that state runs to the end."""
    import sys
    import types
    from multiprocessing import spawn

    import app.services.jobs as jobs

    jobs._mp_context()
    app_dir = jobs._APP_DIR
    script = tmp_path / "dashboard.py"
    script.write_text("")
    fake = types.ModuleType("__main__")
    fake.__file__, fake.__spec__ = str(jobs.os.path.join(app_dir, "dashboard.py")), None
    monkeypatch.setitem(sys.modules, "__main__", fake)
    monkeypatch.setattr(sys, "path", [app_dir, *sys.path])
    d = spawn.get_preparation_data("mmc-fit-test")
    assert "init_main_from_path" not in d and "init_main_from_name" not in d
    assert app_dir not in d["sys_path"] and len(d["sys_path"]) == len(sys.path) - 1
    # another main module keeps the standard behaviour
    fake.__file__ = str(script)
    assert spawn.get_preparation_data("other")["init_main_from_path"] == str(script)
    fake.__file__ = str(jobs.os.path.join(app_dir, "dashboard.py"))
    job = _job(_frame(2000)).start()
    assert job.wait(300) and job.status == "done", job.error


def test_the_test_hold_waits_for_stop_and_is_off_without_its_file(tmp_path, monkeypatch):
    """The browser test's hold (app.services.base_model.HOLD_ENV): with its file present a fit waits and Stop ends it with
    StoppedByUser after the stop flag has been looked at; without the file (or the variable) a fit runs."""
    X = pd.DataFrame({"x": np.arange(200.0)})
    y = np.arange(200.0) % 7
    hold = tmp_path / "hold"
    monkeypatch.setenv(bm.HOLD_ENV, str(hold))
    hold.touch()
    looks = []

    def stop():
        looks.append(1)
        return len(looks) >= 3

    with pytest.raises(bm.StoppedByUser):
        bm.fit_base_model(X, y, "ridge", stop=stop)
    assert len(looks) == 3
    hold.unlink()
    assert bm.fit_base_model(X, y, "ridge", stop=lambda: False).predict(X).shape == (200,)
