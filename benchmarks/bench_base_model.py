"""The in-app base-model fit against the same scikit-learn fit outside the app (issue 11: "within 2x").

For a few table sizes, on the same rows and features (a CPS-like table, gradient boosting on 7 features):

* ``sklearn``: the plain scikit-learn pipeline fitted in one call, default threads, in this process
  (``sklearn 1t``: the same with one OpenMP thread, as the app fits);
* ``app chunks``: :func:`app.services.base_model.fit_base_model` as a thread worker runs it (boosting in chunks of
  BOOST_CHUNK iterations with a look at the stop flag between them, one OpenMP thread);
* ``app 1 call``: the same function as the dashboard's worker process runs it (``KILLABLE``: one call, Stop
  terminates the process);
* ``app job``: a whole dashboard run as the Run page starts it (:class:`app.services.jobs.FitJob` in a worker process
  forked from the fork server, capped at one descent round), reporting the run's ``timings["base_model"]``
  (the fit plus the prediction of every row, hashing and the cache), i.e. what the Run page prints as
  "base model fitted in ... s".

Every time is the minimum of ``--repeat`` runs; the table also says whether the app's predictions equal the
plain fit's (max absolute difference). Run: ``.venv/bin/python benchmarks/bench_base_model.py [--sizes 1k,10k,60k]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

FEATURES = ["educ", "exper", "tenure", "female", "black", "region", "hours"]


def table(n: int, seed: int = 1) -> pd.DataFrame:
    """The CPS-like table the browser tests upload (``tests/test_browser_e2e.py``), read back from its CSV as
    the dashboard reads it."""
    from tests.test_browser_e2e import cps_csv

    with tempfile.TemporaryDirectory() as tmp:
        return pd.read_csv(cps_csv(Path(tmp) / "cps.csv", n, seed))


def plain_sklearn(X: pd.DataFrame, y: np.ndarray, seed: int):
    """What an analyst would write outside the app: the same preprocessing and model, one fit() call."""
    from sklearn.compose import ColumnTransformer
    from sklearn.ensemble import HistGradientBoostingRegressor
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import Pipeline, make_pipeline
    from sklearn.preprocessing import OneHotEncoder

    cat = [c for c in X.columns if not pd.api.types.is_numeric_dtype(X[c])]
    num = [c for c in X.columns if c not in cat]
    pre = ColumnTransformer(
        [
            (
                "cat",
                make_pipeline(
                    SimpleImputer(strategy="constant", fill_value="(missing)"),
                    OneHotEncoder(handle_unknown="ignore", max_categories=30, sparse_output=False),
                ),
                cat,
            ),
            ("num", "passthrough", num),
        ]
    )
    reg = HistGradientBoostingRegressor(
        max_iter=200, learning_rate=0.08, early_stopping=True, validation_fraction=0.15, random_state=seed
    )
    return Pipeline([("pre", pre), ("reg", reg)]).fit(X, y)


def app_job_seconds(df: pd.DataFrame, base_share: float) -> float:
    from app.services.base_model import _BASE_CACHE
    from app.services.jobs import FitJob
    from app.services.specs import BaseSpec, FitSettings, LabelSpec, SplitSpec

    _BASE_CACHE.clear()  # a new fit every time
    job = FitJob(
        df,
        LabelSpec("lwage"),
        BaseSpec("model", None, "hgb", tuple(FEATURES)),
        SplitSpec(base=base_share),
        {"format": "mmc-groups", "version": 1, "groups": []},
        FitSettings(n_boot=0, max_rounds=1),
        worker="process",
    ).start()
    job.wait(600)
    if job.status != "done":
        raise RuntimeError(f"the app job ended with {job.status}: {job.error}")
    return float(job.result.timings["base_model"])


def _timed(fn, *args, **kw):
    t = time.perf_counter()
    out = fn(*args, **kw)
    return out, time.perf_counter() - t


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1k,10k,60k", help="base-model rows, comma-separated (1k,10k,60k)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-job", action="store_true", help="skip the worker-process column")
    a = ap.parse_args(argv)
    from threadpoolctl import threadpool_limits

    from app.services import base_model
    from app.services.base_model import fit_base_model
    from app.services.jobs import prewarm
    from app.services.pipeline import split_rows
    from app.services.specs import SplitSpec

    prewarm()  # as the dashboard does: scikit-learn imported and the fork server started before the first run
    sizes = [int(float(s.lower().replace("k", "e3").replace("m", "e6"))) for s in a.sizes.split(",")]
    base_share = 0.6
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} cores")
    print(
        "| base rows | sklearn s | sklearn 1t s | app chunks s | app 1 call s | app job s | app job / sklearn "
        "| app job / sklearn 1t | trees (plain / chunks / 1 call) | max abs diff of predictions |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n_base in sizes:
        # the job splits the table itself: 30% test, base_share base rows, the rest for the descent
        df = table(int(round(n_base / base_share)))
        rows = split_rows(len(df), SplitSpec(base=base_share), True)["base"]
        X, y = df.iloc[rows][FEATURES].reset_index(drop=True), df["lwage"].to_numpy()[rows]
        times: dict = {k: [] for k in ("sk", "sk1", "chunks", "one", "job")}
        for _ in range(a.repeat):
            ref, t = _timed(plain_sklearn, X, y, 0)
            times["sk"].append(t)
            with threadpool_limits(limits=1):
                _, t = _timed(plain_sklearn, X, y, 0)
            times["sk1"].append(t)
            chunked, t = _timed(fit_base_model, X, y, "hgb", 0, stop=lambda: False)
            times["chunks"].append(t)
            base_model.KILLABLE = True
            one, t = _timed(fit_base_model, X, y, "hgb", 0)
            base_model.KILLABLE = False
            times["one"].append(t)
            if not a.no_job:
                times["job"].append(app_job_seconds(df, base_share))
        best = {k: (min(v) if v else float("nan")) for k, v in times.items()}
        p0 = ref.predict(X)
        diff = max(float(np.max(np.abs(p0 - m.predict(X)))) for m in (chunked, one))
        trees = " / ".join(str(m.named_steps["reg"].n_iter_) for m in (ref, chunked, one))
        print(
            f"| {len(rows):,} | {best['sk']:.2f} | {best['sk1']:.2f} | {best['chunks']:.2f} | {best['one']:.2f} | "
            f"{best['job']:.2f} | {best['job'] / best['sk']:.2f} | {best['job'] / best['sk1']:.2f} | {trees} | "
            f"{diff:.1e} |",
            flush=True,
        )
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
