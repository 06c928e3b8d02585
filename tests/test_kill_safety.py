"""SIGKILL at any moment leaves no truncated or corrupt output: every file a command writes is complete or absent
(outputs go to a temporary file in the output's folder, fsynced, then renamed over the target), and the inputs
are untouched. 50 trials over `mmc fit`, `predict`, `audit` and `compare`, each killed after a delay spread over
the command's run (10% to 110% of an uninterrupted run; the delay only chooses the moment, what is asserted holds
whatever it is)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRIALS = 50


def _digest(path) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("kill")
    rng = np.random.default_rng(0)
    n = 30000
    df = pd.DataFrame({"a": rng.integers(0, 5, n), "b": rng.integers(0, 4, n), "x": rng.normal(size=n)})
    df["y"] = df["x"] + (1 + df["a"]) * rng.normal(size=n)
    df["p"] = df["x"]
    df.to_csv(d / "d.csv", index=False)
    model = d / "m.json"
    args = ["fit", "--data", str(d / "d.csv"), "--label", "y", "--pred", "p", "--group-cols", "a,b", "--out"]
    subprocess.run([sys.executable, "-m", "app.cli", *args, str(model)], check=True, cwd=ROOT, capture_output=True)
    return d


def _command(kind: str, d, out) -> list:
    data, model = str(d / "d.csv"), str(d / "m.json")
    common = ["--data", data, "--label", "y"]
    return {
        "fit": ["fit", *common, "--pred", "p", "--group-cols", "a,b", "--max-order", "2", "--out", out],
        "predict": ["predict", "--data", data, "--model", model, "--pred", "p", "--interval", "calibrated", "--out", out],
        "audit": ["audit", *common, "--model", model, "--pred", "p", "--out", out],
        "compare": ["compare", *common, "--model", model, "--pred-b", "x", "--pred", "p", "--out", out],
    }[kind]  # fmt: skip


def _complete(kind: str, path: str, n_rows: int) -> bool:
    if kind == "predict":
        got = pd.read_csv(path)
        return len(got) == n_rows and {"mean", "lower", "upper"} <= set(got.columns)
    with open(path, encoding="utf-8") as fh:
        doc = json.load(fh)  # a truncated file fails here
    return isinstance(doc, dict) and bool(doc)


@pytest.mark.slow
def test_sigkill_never_leaves_a_truncated_output(inputs):
    d = inputs
    before = {name: _digest(d / name) for name in ("d.csv", "m.json")}
    kinds = ["fit", "predict", "audit", "compare"]
    rng = np.random.default_rng(1)
    outcomes = {"absent": 0, "complete": 0}
    runtime = {}
    for kind in kinds:  # one whole run each: how long the kill window is (and that a run completes)
        out = str(d / f"whole-{kind}.{'csv' if kind == 'predict' else 'json'}")
        started = time.monotonic()
        subprocess.run(
            [sys.executable, "-m", "app.cli", *_command(kind, d, out)], cwd=ROOT, check=True, capture_output=True
        )
        runtime[kind] = time.monotonic() - started
        assert _complete(kind, out, 30000)
    for trial in range(TRIALS):
        kind = kinds[trial % len(kinds)]
        out = str(d / f"out-{trial}.{'csv' if kind == 'predict' else 'json'}")
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", *_command(kind, d, out)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(float(rng.uniform(0.1, 1.1)) * runtime[kind])  # chooses the moment of the kill only
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if os.path.exists(out):
            assert _complete(kind, out, 30000), (kind, trial)
            outcomes["complete"] += 1
        else:
            outcomes["absent"] += 1
        leftovers = [f for f in os.listdir(d) if f.startswith(".tmp") and not f.endswith(".lock")]
        for f in leftovers:  # a temporary file a kill left behind is never at the output's name
            os.remove(d / f)
    assert {name: _digest(d / name) for name in before} == before  # inputs untouched
    assert outcomes["absent"] + outcomes["complete"] == TRIALS
    assert outcomes["absent"] >= TRIALS // 4, outcomes  # most kills land while the command runs
