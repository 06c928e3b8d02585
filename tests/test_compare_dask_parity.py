"""`mmc compare --engine dask` gives the in-memory comparison, intervals and classifier rates included (the same
compare.json numbers to 1e-9: the sums are added per partition, then across them); classifier periods (rates at
the threshold per group and period, their changes tested with the regression periods' error control) on both
engines; one-line errors naming the option.

Cheap: one LocalCluster of 2 worker processes for the module (the commands connect with --scheduler), tables of
a few thousand rows, models of 3 rounds."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

dd = pytest.importorskip("dask.dataframe", reason="the Dask engine needs dask[dataframe] (pip install '.[dask]')")
distributed = pytest.importorskip("distributed", reason="the Dask engine needs distributed")

from app.cli.entry import main  # noqa: E402
from mmc_core import GroupSet  # noqa: E402
from mmc_core.comparison.compare_models import compare_periods, side  # noqa: E402
from mmc_core.fit.model import FittedModel  # noqa: E402

PARTS = [700, 2300, 0, 400, 1600, 1000]  # 6000 rows in 6 unequal partitions, one empty
TOL = 1e-9


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, memory_limit="2GB", dashboard_address=None
    )
    c = distributed.Client(cluster)
    c.wait_for_workers(2, timeout=120)  # both: the tests compare partitions placed round robin over them
    yield c
    c.close()
    cluster.close()


def _write(d, df, sizes=PARTS):
    """The table as one Parquet file (the in-memory engine) and as a folder of partitions (Dask)."""
    df.to_parquet(d / "all.parquet")
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.Schema.from_pandas(df, preserve_index=False)
    (d / "parts").mkdir()
    b = np.cumsum([0, *sizes])
    for i in range(len(sizes)):
        # one schema for every part: with the minimum pandas / pyarrow a part whose text column is all missing was
        # written as type null, and Dask refused the parts' differing schemas
        part = pa.Table.from_pandas(df.iloc[b[i] : b[i + 1]], schema=schema, preserve_index=False)
        pq.write_table(part, d / "parts" / f"part-{i}.parquet")
    return d / "all.parquet", str(d / "parts")


@pytest.fixture(scope="module")
def regression(tmp_path_factory):
    d = tmp_path_factory.mktemp("reg")
    rng = np.random.default_rng(7)
    n = sum(PARTS)
    df = pd.DataFrame({"a": rng.integers(0, 3, n), "b": rng.integers(0, 2, n), "x": rng.normal(size=n)})
    df["y"] = 10 + df["x"] + (1 + 0.5 * df["a"]) * rng.normal(size=n)
    df["p"] = 10 + df["x"]
    df["p_shifted"] = df["p"] + np.where(df["a"] == 2, 0.4, 0.0)
    df["quarter"] = np.array(["2026Q1", "2026Q2", "2026Q3"])[rng.integers(0, 3, n)]
    one, parts = _write(d, df)
    fit = ["fit", "--data", str(one), "--label", "y", "--group-cols", "a,b", "--max-rounds", "3"]
    assert main([*fit, "--pred", "p", "--out", str(d / "with_base.json")]) == 0
    assert main([*fit, "--out", str(d / "plain.json")]) == 0
    return {"dir": d, "df": df, "one": one, "parts": parts}


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    d = tmp_path_factory.mktemp("clf")
    rng = np.random.default_rng(8)
    n = sum(PARTS)
    df = pd.DataFrame({"g": rng.integers(0, 3, n), "x": rng.normal(size=n)})
    p = 1 / (1 + np.exp(-(df["x"] + 0.8 * (df["g"] - 1))))
    df["hired"] = np.where(rng.random(n) < p, "yes", "no")
    df["score"] = 1 / (1 + np.exp(-df["x"]))  # ignores the group effect
    df["quarter"] = np.array(["q1", "q2"])[rng.integers(0, 2, n)]
    one, parts = _write(d, df)
    fit = ["fit", "--data", str(one), "--label", "hired", "--positive", "yes", "--group-cols", "g"]
    assert main([*fit, "--max-rounds", "3", "--pred", "score", "--out", str(d / "a.json")]) == 0
    assert main([*fit, "--max-rounds", "3", "--out", str(d / "b.json")]) == 0
    return {"dir": d, "df": df, "one": one, "parts": parts}


def _both(client, capsys, world, args, name):
    """compare.json of the same command on the numpy engine (one file) and on Dask (the partitions)."""
    docs = []
    for engine, data in (("numpy", world["one"]), ("dask", world["parts"])):
        out = world["dir"] / f"{name}-{engine}.json"
        extra = ["--engine", "dask", "--scheduler", client.scheduler.address] if engine == "dask" else []
        capsys.readouterr()
        code = main(["compare", "--data", str(data), *args, *extra, "--out", str(out)])
        assert code == 0, capsys.readouterr().err
        docs.append(json.loads(out.read_text()))
    return docs


def _max_rel_diff(a: dict, b: dict) -> float:
    """The largest relative difference of the comparisons' numbers (per-group table and findings); the same
    columns, groups, findings and texts otherwise."""
    assert a["by_group"].keys() == b["by_group"].keys() and a["by_group"]["group"] == b["by_group"]["group"]
    assert a["n_tests"] == b["n_tests"] and a["params"] == b["params"]
    worst = 0.0
    for k, va in a["by_group"].items():
        if k == "group":
            continue
        x = np.array(va, dtype=float)  # JSON null (no value) -> NaN
        y = np.array(b["by_group"][k], dtype=float)
        assert np.array_equal(np.isnan(x), np.isnan(y)), k
        ok = ~np.isnan(x)
        worst = max(worst, float(np.max(np.abs(x[ok] - y[ok]) / np.maximum(np.abs(x[ok]), 1.0), initial=0.0)))
    assert [(f["group"], f["kind"], f["direction"]) for f in a["findings"]] == [
        (f["group"], f["kind"], f["direction"]) for f in b["findings"]
    ]
    for fa, fb in zip(a["findings"], b["findings"]):
        for k in ("estimate", "se", "p_value", "p_adjusted", "a", "b"):
            worst = max(worst, abs(fa[k] - fb[k]) / max(abs(fa[k]), 1.0))
    return worst


@pytest.mark.parametrize("method", ["calibrated", "split-conformal", "gaussian"])
def test_interval_comparisons_are_the_same_on_dask(client, regression, capsys, method):
    """Coverage and width per group of each model's intervals: the numbers of the in-memory comparison."""
    d = regression["dir"]
    args = ["--label", "y", "--pred", "p", "--model", str(d / "with_base.json"), "--model", str(d / "plain.json")]
    mem, dsk = _both(client, capsys, regression, [*args, "--interval", method], f"int-{method}")
    assert "coverage" in mem["params"]["compared"]
    assert np.isfinite(np.array(mem["by_group"]["coverage_diff"], float)).all()
    assert np.isfinite(np.array(mem["by_group"]["width_diff"], float)).all()
    worst = _max_rel_diff(mem, dsk)
    print(f"{method}: max relative difference {worst:.2e}")
    assert worst < TOL


def test_classifier_rates_are_the_same_on_dask(client, classifier, capsys):
    """Two classifier models, and a classifier against a probability column: selection rate, TPR and FPR at the
    threshold per group (labels read through the model's positive class) as in memory."""
    d = classifier["dir"]
    two = ["--label", "hired", "--pred", "score", "--threshold", "0.6"]
    two += ["--model", str(d / "a.json"), "--model", str(d / "b.json")]
    mem, dsk = _both(client, capsys, classifier, two, "clf")
    for k in ("selection_rate", "tpr", "fpr"):
        assert np.isfinite(np.array(mem["by_group"][f"{k}_diff"], float)).all()
    w1 = _max_rel_diff(mem, dsk)
    col = ["--label", "hired", "--pred", "score", "--model", str(d / "a.json"), "--pred-b", "score"]
    mem, dsk = _both(client, capsys, classifier, col, "clf-col")
    assert np.isfinite(np.array(mem["by_group"]["tpr_b"], float)).all()  # the column decided at 0.5 too
    w2 = _max_rel_diff(mem, dsk)
    print(f"classifier rates: max relative difference {max(w1, w2):.2e}")
    assert max(w1, w2) < TOL


def test_periods_on_dask_with_intervals_and_classifier_rates(client, regression, classifier):
    """periods_dask: a regression model's calibrated intervals (coverage per period) and a classifier's rates
    per period with their tested changes, as compare_periods in memory."""
    from mmc_core.engines.dask_engine import periods_dask

    for world, model_file, label, base, threshold in (
        (regression, "plain.json", "y", None, None),
        (classifier, "a.json", "hired", "score", 0.4),
    ):
        df = world["df"]
        model = FittedModel.load(world["dir"] / model_file)
        method = None if model.task == "binary" else "calibrated"
        got = periods_dask(
            model,
            dd.read_parquet(world["parts"]),
            label,
            "quarter",
            base,
            method=method,
            threshold=threshold,
        )
        if model.task == "binary":
            from mmc_core.auditing.binary import binary_labels

            y = binary_labels(model, df[label])
        else:
            y = df[label].to_numpy(float)
        s = side(
            model,
            df,
            name="the model",
            base=None if base is None else df[base],
            method=method or "calibrated",
            threshold=threshold,
        )
        want = compare_periods(df, y, s, model.groups, df["quarter"].to_numpy())
        assert got.n_tests == want.n_tests and list(got.changes.columns) == list(want.changes.columns)
        for tab in ("by_period", "changes"):
            a, b = getattr(got, tab), getattr(want, tab)
            num = [c for c in b.columns if c not in ("group", "period", "reference")]
            np.testing.assert_allclose(a[num].to_numpy(float), b[num].to_numpy(float), rtol=TOL, atol=TOL)
        key = "coverage_change" if model.task != "binary" else "tpr_change"
        assert key in want.changes and np.isfinite(want.changes[key]).any()


# ---- classifier periods (in memory) --------------------------------------------------------------------------
def _clf_world(rng, n, k=4, shift=None):
    """Groups g = 0..k-1, a calibrated probability p (the model: the truth) and 0/1 labels drawn from it; with
    ``shift`` = (group, mask): that group's rows under the mask have x moved up by 0.6 (more rows decided
    positive: the selection rate changes; the model stays calibrated)."""
    df = pd.DataFrame({"g": rng.integers(0, k, n), "x": rng.normal(size=n)})
    if shift is not None:
        g, mask = shift
        df.loc[(df["g"] == g) & mask, "x"] += 0.6
    p = 1 / (1 + np.exp(-(1.5 * df["x"] + 0.3 * (df["g"] - 1))))
    y = (rng.random(n) < p).astype(float)
    return df, y, p.to_numpy()


N_NULL = 400


def test_classifier_periods_from_one_distribution_rarely_change():
    """400 audits of a classifier over 3 periods drawn from one distribution: a finding (any group, any rate or
    calibration value, Holm at 0.05 over every test) in at most 5% of them (binomial 99% upper bound: 30)."""
    hits, tests = 0, 0
    for i in range(N_NULL):
        rng = np.random.default_rng(30000 + i)
        df, y, p = _clf_world(rng, 3000)
        res = compare_periods(
            df,
            y,
            side(p, name="M", threshold=0.5),
            GroupSet.from_columns(df, ["g"]),
            rng.integers(0, 3, len(df)),
        )
        hits += bool(res.findings)
        tests += res.n_tests
    print(f"classifier periods, one distribution: findings in {hits}/{N_NULL} audits, {tests / N_NULL:.0f} tests each")
    assert tests / N_NULL >= 40  # rates and calibration of 5 groups x 2 changes are tested
    assert hits <= 30, hits


def test_a_planted_change_of_one_groups_positive_rate_is_found_and_named():
    rng = np.random.default_rng(12)
    n = 20000
    quarter = np.array(["2026Q1", "2026Q2"])[rng.integers(0, 2, n)]
    df, y, p = _clf_world(rng, n, shift=(2, quarter == "2026Q2"))
    res = compare_periods(df, y, side(p, name="M", threshold=0.5), GroupSet.from_columns(df, ["g"]), quarter)
    first = res.findings[0]
    assert (first["group"], first["period"], first["reference"]) == ("g=2", "2026Q2", "2026Q1")
    rates = {f["kind"]: f for f in res.findings if f["group"] == "g=2"}
    assert "selection_rate" in rates and rates["selection_rate"]["after"] > rates["selection_rate"]["before"] + 0.1
    assert "M's selection rate for g=2 changed from" in rates["selection_rate"]["text"]
    assert {f["group"] for f in res.findings} <= {"g=2", "all"}  # no other group is named
    row = res.by_period.set_index(["group", "period"]).loc[("g=2", "2026Q2")]
    assert row["selection_rate_lo"] <= row["selection_rate"] <= row["selection_rate_hi"]


def test_classifier_audit_with_periods_on_the_command_line(classifier, capsys):
    d = classifier["dir"]
    out = d / "audit-periods.json"
    args = ["audit", "--data", str(classifier["one"]), "--label", "hired", "--pred", "score"]
    args += ["--model", str(d / "a.json"), "--period", "quarter", "--threshold", "0.4", "--out", str(out)]
    capsys.readouterr()
    assert main(args) == 0, capsys.readouterr().err
    per = json.loads(out.read_text())["periods"]
    assert per["periods"] == ["q1", "q2"] and per["n_tests"] > 0
    assert {"selection_rate_change", "tpr_change", "fpr_change"} <= set(per["changes"])
    assert "spread_change" not in per["changes"]  # a classifier has no spread


# ---- errors ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "extra, message",
    [
        (["--interval", "multimoment", "--engine", "dask"], "--interval multimoment with --engine dask"),
        (["--interval", "nope"], "--interval nope is not available for model"),
        (["--interval", "nope", "--engine", "dask"], "--interval nope is not available for model"),
        (["--threshold", "1.5", "--engine", "dask"], "--threshold must be strictly between 0 and 1"),
    ],
)
def test_bad_options_are_one_line_naming_the_option(regression, capsys, extra, message):
    d = regression["dir"]
    out = d / "never.json"
    data = regression["parts"] if "dask" in extra else str(regression["one"])
    args = ["compare", "--data", data, "--label", "y", "--pred", "p", "--model", str(d / "with_base.json")]
    args += ["--model", str(d / "plain.json"), *extra, "--out", str(out)]
    capsys.readouterr()
    assert main(args) == 2
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("mmc: error:")]
    assert len(lines) == 1 and message in lines[0], lines
    assert not out.exists()


@pytest.mark.parametrize("world_name", ["regression", "classifier"])
def test_audit_periods_are_the_same_on_both_engines(client, regression, classifier, capsys, world_name):
    """`mmc audit --period` on Dask writes the in-memory periods (a regression's coverage of its calibrated
    intervals, a classifier's rates at --threshold): the same numbers, tests and findings."""
    world = {"regression": regression, "classifier": classifier}[world_name]
    d = world["dir"]
    if world_name == "regression":
        args = ["--label", "y", "--model", str(d / "plain.json")]
    else:
        args = ["--label", "hired", "--pred", "score", "--model", str(d / "a.json"), "--threshold", "0.4"]
    docs = []
    for engine, data in (("numpy", world["one"]), ("dask", world["parts"])):
        out = d / f"audit-{engine}.json"
        extra = ["--engine", "dask", "--scheduler", client.scheduler.address] if engine == "dask" else []
        capsys.readouterr()
        code = main(["audit", "--data", str(data), *args, "--period", "quarter", *extra, "--out", str(out)])
        assert code == 0, capsys.readouterr().err
        docs.append(json.loads(out.read_text())["periods"])
    mem, dsk = docs
    assert mem["n_tests"] == dsk["n_tests"] > 0 and mem["changes"].keys() == dsk["changes"].keys()
    assert ("coverage_change" if world_name == "regression" else "selection_rate_change") in mem["changes"]
    for tab in ("by_period", "changes"):
        for k, v in mem[tab].items():
            if k in ("group", "period", "reference"):
                assert v == dsk[tab][k]
                continue
            np.testing.assert_allclose(np.array(v, float), np.array(dsk[tab][k], float), rtol=TOL, atol=TOL)
    assert [(f["group"], f["kind"]) for f in mem["findings"]] == [(f["group"], f["kind"]) for f in dsk["findings"]]
