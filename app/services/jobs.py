"""The background fitting job the Run page watches: :class:`FitJob` runs :func:`app.services.pipeline.run_pipeline` in a
daemon thread or in a worker process forked from a preloaded fork server (:func:`_mp_context`,
:func:`_child_main`), exposes the growing ``history`` and the ``phase`` for the live view, and honours Stop in
every phase. Also the process-level set-up of the dashboard server: :func:`prewarm` (import scikit-learn and start
the fork server in the background) and :func:`debug` (timing notes). Kept apart from the pipeline because all
threading and multiprocessing lives here.
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
import time
import traceback
from typing import Any

import numpy as np

from app.services.base_model import BASE_LOCK, StoppedByUser, cache_entries, cache_put
from app.services.pipeline import NOT_AUDITED, run_pipeline
from app.services.specs import AuditRun, kept_model_text
from mmc_core.common import MMCError


def debug(msg: str):
    """Timing notes on stderr when MMC_DEBUG_TIMING is set (used to measure Stop latency in the server)."""
    if os.environ.get("MMC_DEBUG_TIMING"):
        print(f"[mmc {time.time():.3f}] {msg}", file=sys.stderr, flush=True)


_PREWARM: list = []
SWITCH_INTERVAL = 0.0005  # seconds; Python's default is 0.005


def prewarm():
    """Import scikit-learn in a background thread, once per process. The first import takes seconds (scipy and
    all), holds the import lock and the interpreter, and used to happen inside the first in-app base-model fit,
    where Stop could not interrupt it and it counted as fit time."""
    with BASE_LOCK:
        if _PREWARM:
            return
        # The fit thread (scikit-learn's Cython drops and retakes the GIL thousands of times per boosting
        # iteration) and the server's page runs share one interpreter: with the default 5 ms switch interval each
        # retake could wait 5 ms for a busy page run (the convoy effect), which made in-app fits many times slower.
        sys.setswitchinterval(SWITCH_INTERVAL)
        t = threading.Thread(target=_import_sklearn, name="mmc-prewarm", daemon=True)
        _PREWARM.append(t)
    t.start()


def _import_sklearn():
    try:
        import sklearn.compose
        import sklearn.ensemble
        import sklearn.impute
        import sklearn.linear_model
        import sklearn.pipeline
        import sklearn.preprocessing  # noqa: F401
    except ImportError:  # pragma: no cover - the base-model fit reports it
        pass
    try:  # start the fork server of background runs now, not on the first Run click
        _mp_context()
        from multiprocessing import forkserver

        forkserver.ensure_running()
    except Exception:  # noqa: BLE001, S110 - the first run starts it then
        pass


def _run_need(df, groups_json, settings) -> int:
    """The memory a run may take (app.services.run_admission.run_bytes): its table's rows and bytes, its groups (and the
    whole table's), its moments."""
    from app.services.run_admission import run_bytes

    try:
        from mmc_core import GroupSet

        n_groups = len(GroupSet.from_json(groups_json)) + 1
    except Exception:  # noqa: BLE001 - the run itself reports bad groups; count the listed ones
        listed = groups_json.get("groups", []) if isinstance(groups_json, dict) else groups_json
        n_groups = (len(listed) if isinstance(listed, list) else 0) + 1
    try:
        nbytes, rows = int(df.memory_usage(index=True, deep=False).sum()), len(df)
    except Exception:  # noqa: BLE001 - not a DataFrame (tests)
        nbytes = rows = 0
    return run_bytes(nbytes, rows, n_groups, int(getattr(settings, "n_moments", 2) or 1))


# ---------------------------------------------------------------------------------------------------
# the background job
# ---------------------------------------------------------------------------------------------------
class FitJob:
    """Run :func:`run_pipeline` in a daemon thread; watch ``history`` / ``phase``; :meth:`stop` to end early.

    ``status`` is one of ``running``, ``done``, ``stopped`` (Stop pressed before anything was fitted: no
    result), ``error``. Stop is honoured within one check of the flag in every phase:

    * base-model fit: in a worker process, at once (the process is terminated; the fit runs in one call); in a
      thread, between two chunks of boosting iterations (nothing is kept; ``stopped``);
    * descent: before the next single update (the model fitted so far is kept, marked stopped, not audited);
    * audit: at once: the job ends with the fitted model (not audited) and the audit thread's result is dropped.

    ``stop_checks`` counts the looks at the flag after it was set (the tests assert that the flag was seen
    before the next boosting chunk / update, not wall-clock times); ``stop_seen_at`` is when it was first seen.
    """

    def __init__(
        self,
        df,
        label_spec,
        base_spec,
        split_spec,
        groups_json,
        settings,
        data_key="",
        data_name="",
        worker: str = "thread",
    ):
        self.worker = worker  # "thread" (in this process) or "process" (a forked worker; see start())
        self._proc = None
        self._mp_stop = None
        self._mp_seen = None
        self.args = (df, label_spec, base_spec, split_spec, groups_json, settings)
        self.settings = settings
        self.data_key, self.data_name = data_key, data_name
        self.label_units = ""  # the units the analyst typed, for the run's texts (set by the Run page)
        self.history: list = []
        self.phase = "starting"
        self.status = "idle"
        self.result: AuditRun | None = None
        self.error = ""
        self.detail = ""
        self.started_at = self.ended_at = 0.0
        self.thresholds: dict = {}
        self.stop_requested_at: float | None = None
        self.stop_seen_at: float | None = None
        self.stop_phase = ""
        self.kept = ""
        self.updates_after_stop = 0
        self._stop = threading.Event()
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._fitted: AuditRun | None = None
        self._abandoned = False
        self._thread: threading.Thread | None = None
        self.id = hashlib.sha1(f"{id(self)}{time.time()}".encode(), usedforsecurity=False).hexdigest()[:8]
        self.admission: Any = None  # app.services.run_admission.RunAdmission: set by start() for a background run
        self.need_bytes = _run_need(df, groups_json, settings)

    # -- control --
    def start(self) -> FitJob:
        """Run in the background: a daemon thread, or with ``worker="process"`` a child process forked from a
        preloaded fork server (its own interpreter: the fit never competes with the server's page runs for the
        GIL, and a phase that keeps nothing is ended by terminating the child). The child reports history rows,
        phases and the result through a queue that a reader thread here turns into this object's attributes."""
        from app.services import run_admission

        self.status = "running"
        self.started_at = time.time()
        self.admission = run_admission.RUNS
        self._thread = threading.Thread(target=self._admitted_run, name=f"mmc-fit-{self.id}", daemon=True)
        self._thread.start()
        return self

    def _admitted_run(self):
        """The background run once the server's run budget admits it (app.services.run_admission: it waits in the queue,
        saying so in its phase, while other analysts' runs hold the budget; Stop while waiting ends it, nothing
        fitted); the reservation is returned when the run ends, however it ends."""
        assert self.admission is not None
        if not self.admission.acquire(self.id, self.need_bytes, self._stop.is_set, self._set_phase):
            with self._lock:
                self._seen()
                self.kept = "nothing was fitted; the previous results are kept"
                self.error, self.status = "stopped while waiting for another analyst's run to finish", "stopped"
                self.args = None
                self.ended_at = time.time()
                self._done.set()
            return
        try:
            self._set_phase("starting")
            if self.worker != "process":
                self._run()
                return
            try:
                queue = self._start_child()
            except Exception as e:  # noqa: BLE001 - reported on the page; Run works again
                self._proc = None
                with self._lock:
                    self.error = f"could not start the fitting process ({type(e).__name__}: {e}); press Run again"
                    self.detail = traceback.format_exc()
                    self.status = "error"
                    self.ended_at = time.time()
                    self._done.set()
                return
            if self._stop.is_set():  # Stop came between the admission and the child's start: pass it on
                self.stop()
            self._read_child(queue)
        finally:
            self.admission.release(self.id)

    def _start_child(self):
        """Start the worker process; returns the queue it reports through."""
        ctx = _mp_context()
        queue = ctx.Queue()
        self._mp_stop = ctx.Event()
        self._mp_seen = ctx.Event()
        self._proc = ctx.Process(
            target=_child_main,
            args=(
                self.args,
                self.data_key,
                self.data_name,
                queue,
                self._mp_stop,
                self._mp_seen,
                cache_entries(self.data_key),
            ),
            name=f"mmc-fit-{self.id}",
            daemon=True,
        )
        self._proc.start()
        self.args = None
        return queue

    def _read_child(self, queue):
        """Turn the child's messages into attributes (history rows, phase, thresholds, fitted run, result)."""
        import queue as queue_mod

        try:
            while True:
                try:
                    kind, payload = queue.get(timeout=0.5)
                except queue_mod.Empty:
                    if self._proc is not None and not self._proc.is_alive():
                        with self._lock:
                            if self.status == "running":
                                if self._stop.is_set() and self.stop_phase.startswith(
                                    ("fitting the base", "preparing", "starting")
                                ):
                                    self.kept = "nothing was fitted; the previous results are kept"
                                    self.error, self.status = "stopped during the base-model fit", "stopped"
                                else:
                                    self.error, self.status = "the fitting process ended unexpectedly", "error"
                                self.ended_at = time.time()
                                self._done.set()
                        return
                    continue
                if kind == "hist":
                    self.history.extend(payload)
                elif kind == "phase":
                    self._set_phase(payload)
                elif kind == "thr":
                    self.thresholds = payload
                elif kind == "base":  # a base model the child fitted: the next run's child starts with it
                    cache_put(*payload)
                elif kind == "seen":
                    self.stop_seen_at = self.stop_seen_at or time.time()
                elif kind == "fitted":
                    self._on_fitted(payload)
                elif kind == "end":
                    status, result, error, detail, kept = payload
                    self.stop_seen()  # a stop the child saw through the shared event is recorded before the end
                    with self._lock:
                        if not self._abandoned and self.status == "running":
                            self.result, self.error, self.detail = result, error, detail
                            self.kept = kept or self.kept
                            self.status = status
                            self.ended_at = time.time()
                            self._done.set()
                    return
        finally:
            if self._proc is not None:
                self._proc.join(timeout=5)

    def run_sync(self) -> FitJob:
        """Run in the calling thread (used for the quick first demo audit and in tests)."""
        self.status = "running"
        self.started_at = time.time()
        self._run()
        return self

    def stop(self):
        if self.stop_requested_at is None:
            self.stop_requested_at = time.time()
            self.stop_phase = self.phase
        self._stop.set()
        if self.admission is not None:
            self.admission.wake()  # a run waiting in the queue ends now
        if self._mp_stop is not None:
            self._mp_stop.set()
            if (
                self._proc is not None
                and self._fitted is None
                and self.phase.startswith(("fitting the base", "preparing", "starting"))
            ):
                # nothing to keep: end the child at once (it may be inside a step that polls no flag)
                self._proc.terminate()
                with self._lock:
                    if self.status == "running":
                        self.stop_seen_at = time.time()
                        self.kept = "nothing was fitted; the previous results are kept"
                        self.error, self.status = "stopped during the base-model fit", "stopped"
                        self.ended_at = time.time()
                        self._done.set()
                return
        with self._lock:
            if self.status == "running" and self._fitted is not None:  # in the audit: end now with the model
                run = self._fitted
                run.audit, run.audit_error = None, NOT_AUDITED
                run.stopped = True
                run.finished_at = time.time()
                self.result = run
                self.kept = self._kept_text(run)
                self._abandoned = True
                self.stop_seen_at = time.time()
                if self._proc is not None:
                    self._proc.terminate()  # the audit's result is not wanted any more
                self.status = "done"
                self.ended_at = time.time()
                self._done.set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    @property
    def running(self) -> bool:
        return self.status == "running"

    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set()

    def stop_seen(self) -> bool:
        """True once the run has seen the stop flag (a worker process reports it through a shared event)."""
        if self.stop_seen_at is None and self._mp_seen is not None and self._mp_seen.is_set():
            self.stop_seen_at = time.time()
        return self.stop_seen_at is not None

    @property
    def elapsed(self) -> float:
        return (self.ended_at or time.time()) - self.started_at if self.started_at else 0.0

    # -- worker --
    def _seen(self):
        if self.stop_seen_at is None:
            self.stop_seen_at = time.time()

    def _callback(self, row: dict) -> bool:
        self.history.append({k: (float(v) if isinstance(v, (np.floating, np.integer)) else v) for k, v in row.items()})
        if self._stop.is_set():
            self._seen()
            return True
        return False

    def _stop_now(self) -> bool:
        if self._stop.is_set():
            self._seen()
            return True
        return False

    def _set_phase(self, text: str):
        debug(f"job {self.id}: {text}")
        self.phase = text

    def _set_thresholds(self, t: dict):
        self.thresholds = dict(t)

    def _on_fitted(self, run: AuditRun):
        with self._lock:
            self._fitted = run

    @staticmethod
    def _kept_text(run: AuditRun) -> str:
        info = getattr(run.model, "info", {}) or {}
        return f"{kept_model_text(info)} was kept, not audited ({info.get('mean_updates', 0):,} mean updates)"

    def _run(self):
        try:
            result = run_pipeline(
                *self.args,
                callback=self._callback,
                stop=self._stop_now,
                phase=self._set_phase,
                data_key=self.data_key,
                data_name=self.data_name,
                on_thresholds=self._set_thresholds,
                on_fitted=self._on_fitted,
            )
            with self._lock:
                if self._abandoned:
                    return
                self.result = result
                if result.stopped and not result.audit:
                    self.kept = self._kept_text(result)
                self.status = "done"
        except StoppedByUser as e:
            with self._lock:
                self.kept = "nothing was fitted; the previous results are kept"
                self.error, self.status = str(e), "stopped"
        except MMCError as e:
            with self._lock:
                if not self._abandoned:
                    self.error, self.status = str(e), "error"
        except MemoryError:
            self.error, self.status = "out of memory: use fewer groups, fewer buckets or a smaller table", "error"
        except Exception as e:  # noqa: BLE001 - shown to the user; the app keeps working
            with self._lock:
                if not self._abandoned:
                    self.error = f"unexpected error: {type(e).__name__}: {e}"
                    self.detail = traceback.format_exc()
                    self.status = "error"
        finally:
            with self._lock:
                if not self._abandoned:
                    self.ended_at = time.time()
                    self.args = None  # drop the reference to the table
                    self._done.set()


_MP_CTX: list = []
_APP_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # app/


def _job_preparation_data(name, _original=None):
    """``multiprocessing.spawn.get_preparation_data`` for the dashboard's job processes, without the Streamlit
    script. While a page runs, ``__main__`` is the script module (app/dashboard.py) and ``sys.path`` has app/
    first (``streamlit run`` puts it there on every run), so every job child used to execute the whole script
    as ``__mp_main__`` (Streamlit, every page module) before its own work, with app/io.py (now app/services/io.py) shadowing the
    standard library's ``io``; a child that failed there ended with "the fitting process ended unexpectedly".
    A job child needs neither: its target, :func:`_child_main`, is imported by name. So the script is not
    re-run and app/ is left off the child's path; a process whose ``__main__`` is anything else is unchanged."""
    d = _original(name)
    main_path = d.get("init_main_from_path")
    if main_path and os.path.dirname(os.path.abspath(main_path)) == _APP_DIR:
        del d["init_main_from_path"]
        d["sys_path"] = [p for p in d.get("sys_path", []) if os.path.abspath(p or ".") != _APP_DIR]
    return d


def _install_job_preparation():
    """Route the standard library's preparation data through :func:`_job_preparation_data` (once)."""
    import functools
    from multiprocessing import spawn

    if getattr(spawn.get_preparation_data, "_mmc_jobs", False):
        return
    wrapped = functools.partial(_job_preparation_data, _original=spawn.get_preparation_data)
    wrapped._mmc_jobs = True
    spawn.get_preparation_data = wrapped


def _mp_context():
    """A fork-server context whose server has numpy, pandas, scikit-learn and this module imported, so a job's
    child starts in a fraction of a second (and is forked from a single-threaded process, not the server)."""
    import multiprocessing as mp

    with BASE_LOCK:
        if not _MP_CTX:
            _install_job_preparation()
            try:
                ctx = mp.get_context("forkserver")
                ctx.set_forkserver_preload(
                    [
                        "numpy",
                        "pandas",
                        "app.services.jobs",
                        "mmc_core",
                        "mmc_core.auditing.metrics",
                        "sklearn.ensemble",
                        "sklearn.compose",
                        "sklearn.pipeline",
                        "sklearn.preprocessing",
                        "sklearn.impute",
                        "sklearn.linear_model",
                    ]
                )
            except ValueError:  # pragma: no cover - no fork server on this platform
                ctx = mp.get_context("spawn")
            _MP_CTX.append(ctx)
        return _MP_CTX[0]


HISTORY_FLUSH = 0.2  # seconds between two batches of history rows sent by a worker process


def _child_main(args, data_key, data_name, queue, stop_event, seen_event, cached=()):
    """The body of a worker process: run the pipeline, report everything through ``queue`` (history rows in
    batches, so that a fast descent does not flood it; a newly fitted base model's predictions, for the server's
    cache) and ``seen_event`` (set the moment Stop is seen). ``cached``: the server's cached base predictions of
    this table, so that a new run with other settings does not fit the same base model again."""
    import app.services.base_model

    # Stop terminates this process during the base-model fit (FitJob.stop), so the fit runs in one call
    app.services.base_model.KILLABLE = True
    known = set()
    for key, pred in cached:
        cache_put(key, pred)
        known.add(key)
    buf, last = [], [time.time()]

    def share_base_models():
        for key, pred in cache_entries():
            if key not in known:
                known.add(key)
                queue.put(("base", (key, pred)))

    def flush():
        if buf:
            queue.put(("hist", list(buf)))
            buf.clear()
        last[0] = time.time()

    def stop():
        if stop_event.is_set():
            seen_event.set()
            return True
        return False

    def callback(row):
        buf.append({k: (float(v) if isinstance(v, (np.floating, np.integer)) else v) for k, v in row.items()})
        if time.time() - last[0] >= HISTORY_FLUSH:
            flush()
        return stop()

    def phase(text):
        flush()
        share_base_models()  # the phase after the base model: send it before a Stop can end this process
        queue.put(("phase", text))

    try:
        result = run_pipeline(
            *args,
            callback=callback,
            stop=stop,
            phase=phase,
            data_key=data_key,
            data_name=data_name,
            on_thresholds=lambda t: queue.put(("thr", dict(t))),
            on_fitted=lambda r: queue.put(("fitted", r)),
        )
        flush()
        kept = FitJob._kept_text(result) if result.stopped and not result.audit else ""
        queue.put(("end", ("done", result, "", "", kept)))
    except StoppedByUser as e:
        queue.put(("end", ("stopped", None, str(e), "", "nothing was fitted; the previous results are kept")))
    except MMCError as e:
        queue.put(("end", ("error", None, str(e), "", "")))
    except MemoryError:
        queue.put(("end", ("error", None, "out of memory: use fewer groups, fewer buckets or a smaller table", "", "")))
    except Exception as e:  # noqa: BLE001 - reported to the page
        queue.put(("end", ("error", None, f"unexpected error: {type(e).__name__}: {e}", traceback.format_exc(), "")))
    finally:
        queue.close()
        queue.join_thread()
