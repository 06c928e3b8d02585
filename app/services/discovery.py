"""Discover on the loaded table: the learning-oracle auditor (:func:`mmc_core.discovery.discover_groups.discover`) run on the rows
that are neither test nor base-model rows, against the base prediction or the last run's model
(:func:`run_discovery`, cached per input), its findings turned into group-file entries
(:func:`discovered_group`) and table rows in words (:func:`describe_finding`), and :class:`DiscoverJob`, the
stoppable thread the Groups page polls. Separate from the fitting job because it has its own spec, result and
cache, and the Run page never needs it.
"""

from __future__ import annotations

import hashlib
import threading
import time
import traceback
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from app.services.base_model import BASE_LOCK, StoppedByUser, base_prediction, limit_threads
from app.services.pipeline import split_rows, take_table_rows
from app.services.run_tables import model_table
from app.services.specs import DISCOVERED_PREFIX, AuditRun, BaseSpec, LabelSpec, SplitSpec, prepare_label
from mmc_core.auditing import percent
from mmc_core.common import DataError, MMCError


@dataclass(frozen=True)
class DiscoverSpec:
    """What Discover searches: ``features`` (columns the rules may use), tree ``max_depth``, ``min_mass`` (smallest
    share of the searched rows a set may hold), ``top`` (accepted sets shown per kind), moments (2 = mean and
    variance), buckets, seed of the search / check split, test ``level``, and ``target``: "base" (the base
    prediction) or "model" (the last run's multicalibrated model)."""

    features: tuple = ()
    max_depth: int = 3
    min_mass: float = 0.01
    top: int = 5
    n_moments: int = 2
    n_buckets: int = 5
    seed: int = 0
    level: float = 0.05
    target: str = "base"


def discovered_group(f, taken=()) -> dict:
    """A finding as a group dict of the group file grammar, with the descriptive fields ``mmc discover`` writes
    (``kind`` marks it as discovered; the fields never change membership)."""
    name = DISCOVERED_PREFIX + f.name
    if len(name) > 190:
        name = name[:187] + "..."
    base, k = name, 2
    while name in taken:
        name, k = f"{base} #{k}", k + 1
    d = f.rule.group(name).to_dict()
    d.update(
        kind=f.kind,
        count=int(f.count),
        mass=float(f.mass),
        region=str(f.region)[:200],
        violation=float(f.violation),
        p_value=float(f.p_value),
    )
    d["mean_residual" if f.kind == "mean" else "moment_error"] = float(f.residual_label_units)
    return d


def describe_finding(f, label: str, units: str = "") -> dict:
    """One finding as a table row in words: the rule, what is wrong, its size with a 95% interval (selection-adjusted
    for an accepted finding), adjusted p."""
    u = f" {units}" if units else ""
    lo, hi = f.ci()
    fcr = getattr(f, "ci_fcr", None)
    ci = "95% CI" if getattr(f, "ci_z", None) is None or fcr is None else f"selection-adjusted {percent(1 - fcr)} CI"
    if f.kind == "mean":
        direction = "prediction too low" if f.residual > 0 else "prediction too high"
        what = f"mean of {label}"
        size = f"{f.residual_label_units:+.3g}{u} ({ci} {lo:+.3g} to {hi:+.3g})"
    else:
        a = int(f.kind.split("_")[1])
        what = "variance" if a == 2 else f"moment {a}"
        direction = f"{what} under-predicted" if f.residual > 0 else f"{what} over-predicted"
        power = "²" if a == 2 else f"^{a}"
        unit = f" {units}{power}" if units else f" ({label} units){power}"
        size = f"{f.residual_label_units:+.3g}{unit} ({ci} {lo:+.3g} to {hi:+.3g})"
    return {
        "rule": f.name,
        "kind": f.kind,
        "error": direction,
        "observed − predicted": size,
        "rows": int(f.count),
        "share": float(f.mass),
        "p (adjusted)": float(f.p_value),
        "check rows": int(f.check_count),
        "region": f.region,
    }


@dataclass
class DiscoverResult:
    discovery: object  # mmc_core.discovery.discover_groups.Discovery
    findings: list  # the accepted findings shown (top per kind)
    groups: list  # discovered_group(f) for each, same order
    n_rows: int  # rows searched + checked (never the test or base-model rows)
    label: str
    target: str
    note: str = ""
    seconds: float = 0.0
    also: list = field(default_factory=list)  # per shown finding: findings of other kinds for the same rule


_DISCOVER_CACHE: OrderedDict[tuple, DiscoverResult] = OrderedDict()


def _checked_features(df, label_spec: LabelSpec, base_spec: BaseSpec, spec, run, data_key: str) -> list:
    """The rule features, after the checks that the inputs can work (DataError with a sentence for the user)."""
    feats = [f for f in spec.features if f in df.columns]
    if not spec.features:
        raise DataError("choose at least one feature column for the rules (Discover searches conditions on them)")
    missing = [f for f in spec.features if f not in df.columns]
    if missing:
        raise DataError(f"feature column(s) not in the data: {', '.join(map(str, missing))}")
    if label_spec.column in feats:
        raise DataError(
            f"the label '{label_spec.column}' cannot be a feature of a group (groups must be known for new rows)"
        )
    if spec.target == "model":
        if run is None or run.data_key != data_key:
            raise DataError(
                "there is no fitted model for this table yet: run the audit first, or discover on the base prediction"
            )
    elif base_spec.kind == "none":
        raise DataError(
            "Discover looks for groups on which a prediction is wrong, and there is no base prediction: "
            "choose a prediction column or an in-app base model on the Data page (or run the audit "
            "and discover on its model)"
        )
    return feats


def _target(df, label, label_spec, base_spec, split_spec, spec, run, feats, data_key, stop, say) -> tuple:
    """What is searched: (rows, base prediction, its words, model or None, columns): the last run's fitting and
    held-out rows with its model, or the base prediction's fitting rows (the base model fitted if needed)."""
    if spec.target == "model":
        rows = np.sort(np.concatenate([run.split["fit"], run.split["calibration"]]))
        base = run.base
        target_note = "the last run's multicalibrated model"
        model = run.model
        cols = sorted(set(feats) | set(model.input_columns()))
    else:
        split = split_rows(len(df), split_spec, base_spec.kind == "model", 0.0)
        rows = split["fit"]
        if base_spec.kind == "model":
            say(f"fitting the base model on {split['base'].size:,} rows")
        base, _ = base_prediction(
            df, label, label_spec, base_spec, split, split_spec, data_key, stop=stop, progress=None
        )
        target_note = "the base prediction"
        model = None
        cols = feats
    return rows, base, target_note, model, cols


def _one_group_per_rule(disc, top: int) -> tuple:
    """The findings shown (at most ``top`` per kind), one per rule: a rule accepted for the mean and for the
    variance is shown once (the strongest kind first, mean before moments) with its other findings in ``also``;
    and the group of each, named apart."""
    shown: list = []
    also: list = []
    seen: dict = {}
    for f in disc.top(top):
        k = f.rule.key()
        if k in seen:
            also[seen[k]].append(f)
            continue
        seen[k] = len(shown)
        shown.append(f)
        also.append([])
    taken: set = set()
    groups = []
    for f in shown:
        g = discovered_group(f, taken)
        taken.add(g["name"])
        groups.append(g)
    return shown, also, groups


def run_discovery(
    df: pd.DataFrame,
    label_spec: LabelSpec,
    base_spec: BaseSpec,
    split_spec: SplitSpec,
    spec: DiscoverSpec,
    run: AuditRun | None = None,
    data_key: str = "",
    stop=None,
    phase=None,
    progress=None,
) -> DiscoverResult:
    """Discover on the rows that are neither test rows (they stay fresh for the audit) nor base-model training
    rows (their base predictions are over-fitted): :func:`mmc_core.discovery.discover_groups.discover` splits them into search
    and check halves and returns the sets whose error is significant on the check half. Cached on its inputs.

    Raises DataError with a sentence for the user when the inputs cannot work (no features, no prediction...)."""
    from mmc_core.discovery import discover

    def say(text):
        if phase is not None:
            phase(text)

    t0 = time.perf_counter()
    feats = _checked_features(df, label_spec, base_spec, spec, run, data_key)
    key = (data_key, label_spec, base_spec, split_spec, spec, run.finished_at if spec.target == "model" and run else 0)
    with BASE_LOCK:
        if data_key and key in _DISCOVER_CACHE:
            _DISCOVER_CACHE.move_to_end(key)
            return _DISCOVER_CACHE[key]
    say("preparing the label and the rows")
    label = prepare_label(df, label_spec)
    rows, base, target_note, model, cols = _target(
        df, label, label_spec, base_spec, split_spec, spec, run, feats, data_key, stop, say
    )
    if rows.size < 40:
        raise DataError(f"only {rows.size} row(s) outside the test (and base-model) rows: too few to discover on")
    # the last run's model reads its base variance too, which the table does not have (model_table adds it)
    X = take_table_rows(df, rows, cols) if model is None or run is None else model_table(df, run, rows, extra=feats)
    say(f"searching {rows.size:,} rows ({target_note})")
    try:
        disc = discover(
            X,
            label.y[rows],
            prediction=None if base is None else base[rows],
            model=model,
            features=feats,
            max_depth=int(spec.max_depth),
            min_mass=float(spec.min_mass),
            n_moments=int(spec.n_moments),
            n_buckets=int(spec.n_buckets),
            label_range=(label.lo, label.hi),
            seed=int(spec.seed),
            level=float(spec.level),
            label_name=label.name,
            stop=stop,
            progress=progress,
        )
    except ImportError as e:
        raise DataError(f"Discover needs scikit-learn ({e})") from None
    shown, also, groups = _one_group_per_rule(disc, int(spec.top))
    out = DiscoverResult(
        disc,
        shown,
        groups,
        int(rows.size),
        label.name,
        spec.target,
        also=also,
        note=f"{rows.size:,} rows (the test rows"
        + (" and the base model's training rows" if base_spec.kind == "model" else "")
        + " were not used)",
        seconds=time.perf_counter() - t0,
    )
    if data_key:
        with BASE_LOCK:
            _DISCOVER_CACHE[key] = out
            while len(_DISCOVER_CACHE) > 8:
                _DISCOVER_CACHE.popitem(last=False)
    return out


class DiscoverJob:
    """:func:`run_discovery` in a daemon thread: ``phase`` / ``done`` / ``total`` for a progress bar, :meth:`stop`
    ends it before the next oracle call (or the next boosting chunk of an in-app base model); nothing is kept.
    ``status``: running, done, stopped, error."""

    def __init__(self, df, label_spec, base_spec, split_spec, spec, run=None, data_key=""):
        self.args = (df, label_spec, base_spec, split_spec, spec)
        self.run, self.data_key = run, data_key
        self.spec = spec
        self.status, self.phase, self.error = "idle", "starting", ""
        self.done, self.total = 0, 0
        self.result: DiscoverResult | None = None
        self.stop_checks_after_stop = 0
        self._stop = threading.Event()
        self._done = threading.Event()
        self.started_at = self.ended_at = 0.0
        self.id = hashlib.sha1(f"d{id(self)}{time.time()}".encode(), usedforsecurity=False).hexdigest()[:8]
        try:  # what the search may take, as a run with one group (app.services.run_admission)
            from app.services.run_admission import run_bytes

            self.need_bytes = run_bytes(int(df.memory_usage(index=True, deep=False).sum()), len(df), 2, 1)
        except Exception:  # noqa: BLE001 - not a DataFrame (the search reports it)
            self.need_bytes = 0

    def start(self) -> DiscoverJob:
        self.status, self.started_at = "running", time.time()
        threading.Thread(target=self._admitted_work, name=f"mmc-discover-{self.id}", daemon=True).start()
        return self

    def _admitted_work(self):
        """The search once the server's run budget admits it (app.services.run_admission: it waits, saying so in its
        phase, while other analysts' runs hold the budget; Stop while waiting ends it, nothing kept)."""
        from app.services import run_admission

        runs = run_admission.RUNS
        if not runs.acquire(self.id, self.need_bytes, self._stop.is_set, self._set_phase):
            self.status, self.error = (
                "stopped",
                "stopped by you while waiting for another analyst's run: nothing was kept",
            )
            self.ended_at = time.time()
            self.args = self.run = None
            self._done.set()
            return
        try:
            self._set_phase("starting")
            self._work()
        finally:
            runs.release(self.id)

    def run_sync(self) -> DiscoverJob:
        self.status, self.started_at = "running", time.time()
        self._work()
        return self

    def stop(self):
        self._stop.set()
        from app.services import run_admission

        run_admission.RUNS.wake()  # a search waiting in the queue ends now

    def wait(self, timeout=None) -> bool:
        return self._done.wait(timeout)

    @property
    def running(self) -> bool:
        return self.status == "running"

    @property
    def elapsed(self) -> float:
        return (self.ended_at or time.time()) - self.started_at if self.started_at else 0.0

    def _stop_now(self) -> bool:
        if self._stop.is_set():
            self.stop_checks_after_stop += 1
            return True
        return False

    def _progress(self, done, total, text):
        self.done, self.total = int(done), int(total)
        self.phase = f"searching {text}"

    def _set_phase(self, text):
        self.phase = text

    def _work(self):
        from mmc_core.discovery import DiscoveryStopped

        try:
            with limit_threads():
                res = run_discovery(
                    *self.args,
                    run=self.run,
                    data_key=self.data_key,
                    stop=self._stop_now,
                    phase=self._set_phase,
                    progress=self._progress,
                )
            self.result, self.status = res, "done"
        except (DiscoveryStopped, StoppedByUser):
            self.status, self.error = "stopped", "stopped by you: nothing was kept"
        except MMCError as e:
            self.status, self.error = "error", str(e)
        except MemoryError:
            self.status, self.error = "error", "out of memory: use fewer features, a smaller depth or a smaller table"
        except Exception as e:  # noqa: BLE001 - shown to the user as one line; the page keeps working
            self.status, self.error = "error", f"unexpected error: {type(e).__name__}: {e}"
            self.detail = traceback.format_exc()
        finally:
            self.ended_at = time.time()
            self.args = None
            self.run = None
            self._done.set()
