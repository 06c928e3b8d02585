"""Saved models do not depend on the BLAS thread count (issue 15).

Two fresh interpreters fit the same model with OPENBLAS_NUM_THREADS (and the OMP / MKL equivalents) set to 1 and
to 2 and save it; the JSON files must be identical byte for byte once the wall-clock fields (every "seconds" key
of the fit's info and history, which no two runs share) are blanked. Fitted with the default calibration (``cc``) and
with the benchmark-only ``ridge-cqr`` of benchmarks/interval_fitters (whose quantile regression used dense products
before)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r"""
import json, sys
import numpy as np
from app.services.demo_data import load_dataset
from mmc_core import GroupSet, MomentMulticalibrator
from mmc_core import intervals as iv
from benchmarks.interval_fitters import fit_approach

out, approach = sys.argv[1], sys.argv[2]
df = load_dataset("islp_wage")
y = df["wage"].to_numpy(float)
groups = GroupSet.from_columns(df, ["race", "education", "maritl", "age", "jobclass", "health"], max_order=2)
est = MomentMulticalibrator(n_moments=2, calibration_fraction=0.5, random_state=3)
est.fit(df, y, groups)
if approach != "default":
    cal = est.calibration_index_
    table = {c: df[c].to_numpy()[cal] for c in df.columns}
    scale = est.model_.scale
    est.model_.extras["intervals"] = iv.calibrate(est.model_, table, scale.to_unit(y[cal]), None,
                                                  approach=approach, fitter=fit_approach)
est.save(out)
"""


def _fit(tmp_path: Path, threads: int, approach: str) -> bytes:
    env = dict(os.environ)
    for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
        env[k] = str(threads)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    out = tmp_path / f"model_{approach}_{threads}.json"
    subprocess.run([sys.executable, "-c", SCRIPT, str(out), approach], check=True, cwd=ROOT, env=env, timeout=600)
    return out.read_bytes()


def _without_clock(raw: bytes) -> bytes:
    """The file with every "seconds": <number> replaced by "seconds": 0 (byte-level, nothing else touched)."""
    out = re.sub(rb'"seconds":\s*-?[0-9.eE+-]+', b'"seconds":0', raw)
    json.loads(out)  # still a valid model file
    return out


@pytest.mark.slow
@pytest.mark.parametrize("approach", ["default", "ridge-cqr"])
def test_saved_model_independent_of_blas_threads(tmp_path, approach):
    one, two = _fit(tmp_path, 1, approach), _fit(tmp_path, 2, approach)
    assert b'"seconds"' in one and b"theta" in one
    assert _without_clock(one) == _without_clock(two)
