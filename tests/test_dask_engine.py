"""The Dask engine (mmc_core/engines/dask_engine.py) against the numpy engine, on a LocalCluster of 2 worker
processes: same update sequence, same predictions (to 1e-9: sums are added in another order, so the last
bits may differ), same model JSON format both ways; exact quantile cuts; clear errors for bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

dd = pytest.importorskip("dask.dataframe", reason="the Dask engine needs dask[dataframe] (pip install '.[dask]')")
distributed = pytest.importorskip("distributed", reason="the Dask engine needs distributed")

from mmc_core import GroupSet, MomentMulticalibrator  # noqa: E402
from mmc_core.common.errors import MMCError  # noqa: E402
from mmc_core.engines import dask_engine as de  # noqa: E402
from mmc_core.engines import dask_quantiles as dq  # noqa: E402
from mmc_core.fit.model import FittedModel  # noqa: E402

SIZES = [5000, 60000, 12000, 40000, 1000, 52000, 30000]  # 200k rows in 7 unequal partitions


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, memory_limit="3GB", dashboard_address=None
    )
    c = distributed.Client(cluster)
    c.wait_for_workers(2, timeout=120)  # both: the tests compare partitions placed round robin over them
    yield c
    c.close()
    cluster.close()


N_ROWS = sum(SIZES)


def make_frame(n=N_ROWS, seed=3):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame(
        {
            "region": rng.integers(0, 4, n),
            "age": rng.normal(45, 12, n).round(1),
            "kind": rng.choice(["a", "b", "c"], n, p=[0.5, 0.3, 0.2]),
        }
    )
    sd = 0.4 + 0.3 * (df["kind"] == "c") + 0.01 * np.abs(df["age"] - 45)
    df["base"] = 1.0 + 0.2 * df["region"] + 0.01 * (df["age"] - 45)
    df["y"] = df["base"] + 0.15 * (df["kind"] == "b") + rng.normal(size=n) * sd
    return df


def split(df, sizes=SIZES):
    import dask

    b = np.cumsum([0] + list(sizes))
    return dd.from_delayed([dask.delayed(df.iloc[b[i] : b[i + 1]]) for i in range(len(sizes))], meta=df.iloc[:0])


GROUPS_JSON = {
    "format": "mmc-groups",
    "version": 1,
    "groups": [
        {"name": "older", "where": [{"column": "age", "op": ">=", "value": 55}]},
        {
            "name": "young b",
            "where": [
                {"column": "age", "op": "between", "lo": None, "hi": 35},
                {"column": "kind", "op": "==", "value": "b"},
            ],
        },
        {"name": "region 0/3", "where": [{"column": "region", "op": "in", "values": [0, 3]}]},
        {
            "name": "c or old",
            "any": [[{"column": "kind", "op": "==", "value": "c"}], [{"column": "age", "op": ">", "value": 70}]],
        },
    ],
}


def assert_same_fit(e_np, e_dk, df, base=None):
    l1, l2 = e_np.model_.log, e_dk.model_.log
    assert len(l1) == len(l2) > 0
    for u, v in zip(l1, l2):
        assert (u.target, u.partition, u.group, u.cells.tolist()) == (v.target, v.partition, v.group, v.cells.tolist())
        np.testing.assert_allclose(v.deltas, u.deltas, rtol=1e-9, atol=1e-12)
    assert e_np.model_.round_ends == e_dk.model_.round_ends
    p1 = e_np.model_.predict(df, base)
    p2 = e_dk.model_.predict(df, base)
    for k in p1:
        assert np.max(np.abs(p1[k] - p2[k])) <= 1e-9, k
    return max(float(np.max(np.abs(p1[k] - p2[k]))) for k in p1)


def _fit_both(client, df, groups, **kw):
    kw.setdefault("calibration_fraction", 0.0)
    e_np = MomentMulticalibrator(**kw).fit(df, df["y"], groups)
    e_dk = MomentMulticalibrator(**kw).fit(split(df), "y", groups, client=client)
    return e_np, e_dk


def test_groups_from_columns_match_numpy_cuts(client):
    df = make_frame()
    want = GroupSet.from_columns(df, ["region", "age", "kind"], max_order=2)
    got = de.groups_from_columns(split(df), ["region", "age", "kind"], max_order=2, client=client)
    assert got.to_json() == want.to_json()
    assert any(c.op == "between" for g in got.groups for c in g.where)  # age is cut at exact quartiles


@pytest.mark.parametrize("n", [1, 2, 3, 10, 1001])
def test_exact_quantiles_bit_for_bit(n):
    rng = np.random.default_rng(n)
    v = rng.normal(size=n) if n > 3 else np.array([2.0, -1.0, 7.5])[:n]
    if n == 1001:
        v[::7] = 0.25  # ties
    chunks = np.array_split(v, 4)
    qs = np.array([0.2, 0.25, 0.5, 0.75, 0.8])
    got = de.exact_quantiles(
        lambda: [dq.sketch(c) for c in chunks], lambda lo, hi: [dq.bracket(c, lo, hi) for c in chunks], qs
    )
    assert got.tolist() == np.quantile(v, qs).tolist()


def test_k1_groups_from_columns_same_updates_and_predictions(client):
    df = make_frame()
    groups = GroupSet.from_columns(df, ["region", "age", "kind"])  # = groups_from_columns (tested above)
    e_np, e_dk = _fit_both(client, df, groups, n_moments=1)
    assert_same_fit(e_np, e_dk, df)
    # and the Dask engine's prediction (map_partitions over the numpy replay) is the numpy one, exactly
    got = de.predict_dask(e_np.model_, split(df)).compute()
    want = e_np.model_.predict(df)
    assert np.array_equal(got["mean"].to_numpy(), want["mean"])


def test_k2_groups_from_json_file_same_updates_and_predictions(client, tmp_path):
    df = make_frame()
    path = tmp_path / "groups.json"
    path.write_text(json.dumps(GROUPS_JSON))
    groups = GroupSet.from_json(path.read_text())
    e_np, e_dk = _fit_both(client, df, groups, n_moments=2, max_rounds=6)
    assert_same_fit(e_np, e_dk, df)
    # the fitting rows' residual kurtosis the audit's variance tests allow for: the audit's pooled estimate,
    # its parts summed over the partitions (each partition's membership signatures cells of their own)
    from mmc_core.auditing.audit_findings import kurtosis_of_parts, kurtosis_parts

    b = np.cumsum([0] + list(SIZES))
    span = e_dk.model_.scale.span
    parts = []
    for i in range(len(SIZES)):
        rows = df.iloc[b[i] : b[i + 1]]
        p = e_dk.model_.predict(rows)
        r = (rows["y"].to_numpy() - p["mean"]) / span
        parts.append(kurtosis_parts(groups.evaluate(rows).sums(), r, p["moment_2"] / span**2))
    want = kurtosis_of_parts(np.sum(parts, axis=0))
    assert 1 < want == pytest.approx(e_dk.model_.info["residual_kurtosis"], rel=1e-9)
    assert e_np.model_.info["residual_kurtosis"] == pytest.approx(want, rel=0.2)  # cells split by partitions
    # same JSON format both ways: a Dask-fitted model saved and loaded predicts with numpy; a numpy one on Dask
    saved = tmp_path / "m.json"
    e_dk.save(saved)
    loaded = FittedModel.load(saved)
    assert loaded.to_dict()["format"] == e_np.model_.to_dict()["format"]
    assert loaded.to_dict()["version"] == e_np.model_.to_dict()["version"]
    got = de.predict_dask(e_np.model_, split(df)).compute()
    want = loaded.predict(df)
    for k in want:
        assert np.max(np.abs(got[k].to_numpy() - want[k])) <= 1e-9


def test_k2_with_base_and_quantile_mean_buckets(client):
    df = make_frame()
    groups = GroupSet.from_columns(df, ["region", "kind"])
    kw = dict(n_moments=2, mean_buckets="quantile", max_rounds=4, calibration_fraction=0.0)
    # the default base_recalibration "auto" (the group-linear map) on both engines: the Dask engine fits it on the
    # numpy engine's own sample of the rows, drawn over the partitions
    e_np = MomentMulticalibrator(**kw).fit(df, df["y"], groups, base_prediction=df["base"], base_name="base")
    e_dk = MomentMulticalibrator(**kw).fit(split(df), "y", groups, base_prediction="base", client=client)
    assert e_np.model_.params.mean_edges == e_dk.model_.params.mean_edges  # exact quantiles of the (mapped) base
    assert e_np.model_.init_mean == e_dk.model_.init_mean
    assert e_np.model_.info["base_recalibration"] == e_dk.model_.info["base_recalibration"]
    assert_same_fit(e_np, e_dk, df, df["base"].to_numpy())


def _spread_frame(n, seed, spread=1.8):
    """An over-spread base (``spread`` x around the true mean): the group-linear map is kept."""
    df = make_frame(n, seed)
    df["spread"] = df["base"].mean() + spread * (df["base"] + 0.15 * (df["kind"] == "b") - df["base"].mean())
    return df


@pytest.mark.parametrize("n", [30000, 120000])
def test_group_linear_map_is_the_numpy_engines(client, n):
    """Under CV_MAX_ROWS (50,000) fitting rows the map is fitted on all of them, above on the numpy engine's own
    seeded sample, drawn here over the partitions in order: the same map, updates and predictions."""
    df = _spread_frame(n, 5)
    groups = GroupSet.from_columns(df, ["region", "kind"], 2)
    kw = dict(n_moments=2, max_rounds=3, calibration_fraction=0.0)
    e_np = MomentMulticalibrator(**kw).fit(df, df["y"], groups, base_prediction=df["spread"], base_name="spread")
    sizes = [n // 5] * 4 + [n - 4 * (n // 5)]
    e_dk = MomentMulticalibrator(**kw).fit(split(df, sizes), "y", groups, base_prediction="spread", client=client)
    assert e_dk.model_.init_mean["kind"] == "base-group-linear" and e_dk.model_.init_mean["slope"] < -0.2
    assert e_np.model_.init_mean == e_dk.model_.init_mean
    assert_same_fit(e_np, e_dk, df, df["spread"].to_numpy())


def test_intervals_are_calibrated_on_the_base_as_given(client):
    """With held-out rows and the map kept, the interval record is calibrated on the held-out rows' base as
    given (the model maps it on predict, as on any new row): 90% intervals cover fresh rows within the range the
    interval method is held to (issue 9: 0.89-0.93): 0.908 here; calibrated on the mapped base (so mapped
    twice) they covered 0.935."""
    df, fresh = _spread_frame(40000, 6, 4.0), _spread_frame(40000, 7, 4.0)
    groups = GroupSet.from_columns(df, ["region", "kind"], 2)
    est = MomentMulticalibrator(n_moments=2, calibration_fraction=0.25)
    est.fit(split(df, [10000, 20000, 10000]), "y", groups, base_prediction="spread", client=client)
    assert est.model_.init_mean["kind"] == "base-group-linear"
    iv = est.predict_interval(fresh, fresh["spread"], delta=0.1)
    y = fresh["y"].to_numpy()
    cov = float(np.mean((y >= iv[:, 0]) & (y <= iv[:, 1])))
    assert 0.89 <= cov <= 0.93, cov


def test_shrunken_cells_and_the_map_on_held_out_rows(client):
    """With held-out rows the Dask engine fits the shrunken cell corrections as the numpy engine does (on a
    sample of the fitting rows, vetoed on the held-out rows): on planted cell biases they are kept and lower
    the error against the truth; the intervals are calibrated on the held-out rows' base as given (the model
    maps it), and a saved model predicts what the fitted one does."""
    from test_core_cells import _cell_bias_world

    X, y, mu, _, _ = _cell_bias_world(80_000, 2, bias_seed=2, size=0.02)
    Xt, yt, mut, truth, _ = _cell_bias_world(40_000, 102, bias_seed=2, size=0.02)
    df = X.assign(y=y, base=mu)
    groups = GroupSet.from_columns(df, ["g"])
    err = {}
    for on in (True, False):
        est = MomentMulticalibrator(n_moments=2, label_range=(-1, 2), shrunken_cells=on)
        est.fit(split(df, [30000, 20000, 30000]), "y", groups, base_prediction="base", client=client)
        err[on] = float(np.mean((est.model_.predict(Xt, mut)["mean"] - truth) ** 2))
        if on:
            m = est.model_
            assert m.info["shrunken_cells"]["kept"] and m.has_cells, m.info["shrunken_cells"]
            assert m.info["history"][m.info["kept_round"]]["cells_max_mean_violation"] == pytest.approx(est.alpha_)
            again = FittedModel.from_json(m.to_json())
            np.testing.assert_array_equal(again.predict(Xt, mut)["mean"], m.predict(Xt, mut)["mean"])
            # 90% intervals calibrated on the held-out rows (the base as given; mapped twice they would be
            # calibrated on other predictions than predict makes): fresh rows covered in the range the interval
            # method is held to (issue 9: 0.89-0.93 on average over groups)
            iv = est.predict_interval(Xt, mut, delta=0.1)
            cov = float(np.mean((yt >= iv[:, 0]) & (yt <= iv[:, 1])))
            assert 0.89 <= cov <= 0.93, cov
    assert err[True] < err[False], err


@pytest.mark.slow
def test_k4_groups_from_columns_same_updates_and_predictions(client):
    df = make_frame()
    groups = GroupSet.from_columns(df, ["region", "age", "kind"])
    e_np, e_dk = _fit_both(client, df, groups, n_moments=4, max_rounds=4)
    assert_same_fit(e_np, e_dk, df)


def test_held_out_rows_early_stopping_and_intervals(client):
    df = make_frame(60000)
    groups = GroupSet.from_columns(df, ["region", "kind"])
    est = MomentMulticalibrator(n_moments=2, max_rounds=3, calibration_fraction=0.25)
    est.fit(split(df, [20000, 5000, 35000]), "y", groups, client=client)
    info = est.model_.info
    assert info["engine"]["name"] == "dask" and info["n_calibration"] == 15000
    assert "holdout_mse" in info["history"][0]
    assert "intervals" in est.model_.extras
    # the default interval_calibration "auto" keeps the held-out calibration on the Dask engine
    assert est.model_.extras["intervals"]["rows"] == "held-out"
    # the kept model replays to the predictions it was audited with
    FittedModel.from_json(est.model_.to_json()).predict(df)


def test_engine_argument_and_bad_engine(client):
    df = make_frame(3000)
    est = MomentMulticalibrator(n_moments=1, calibration_fraction=0.0).fit(df, "y", None, engine="dask", client=client)
    assert est.model_.info["engine"]["name"] == "dask"
    from mmc_core.common.errors import MMCError

    with pytest.raises(MMCError, match="engine"):
        MomentMulticalibrator().fit(df, df["y"], engine="spark")


def test_bad_label_is_a_clear_error(client):
    df = make_frame(3000)
    df.loc[1500, "y"] = np.nan
    from mmc_core.common.errors import DataError

    with pytest.raises(DataError, match="label 'y'"):
        MomentMulticalibrator(calibration_fraction=0.0).fit(split(df, [1000, 2000]), "y", None, client=client)


def test_importing_mmc_core_does_not_import_dask():
    code = "import sys, mmc_core, mmc_core.engines; print('dask' in sys.modules, 'distributed' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


# ---- the CLI: mmc fit|predict|audit --engine dask ---------------------------------------------------------------
def _parquet_dir(tmp_path, df, sizes):
    d = tmp_path / "data"
    d.mkdir()
    b = np.cumsum([0] + list(sizes))
    for i in range(len(sizes)):
        df.iloc[b[i] : b[i + 1]].to_parquet(d / f"part-{i}.parquet")
    return d


def test_cli_fit_predict_audit_on_a_running_scheduler(client, tmp_path, capsys):
    from app.cli.entry import main

    df = make_frame(20000)
    d = _parquet_dir(tmp_path, df, [4000, 11000, 5000])
    addr = client.scheduler.address
    model = tmp_path / "m.json"
    rc = main(
        [
            "fit",
            "--engine",
            "dask",
            "--scheduler",
            addr,
            "--data",
            str(d / "*.parquet"),
            "--label",
            "y",
            "--group-cols",
            "region,kind",
            "--calibration-fraction",
            "0",
            "--max-rounds",
            "3",
            "--out",
            str(model),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "mmc: round 1:" in err  # a progress line per round
    est = MomentMulticalibrator(n_moments=2, calibration_fraction=0.0, max_rounds=3).fit(
        df, df["y"], GroupSet.from_columns(df, ["region", "kind"])
    )
    assert_same_fit(est, MomentMulticalibrator.load(model), df)
    out = tmp_path / "pred.parquet"
    assert (
        main(
            [
                "predict",
                "--engine",
                "dask",
                "--scheduler",
                addr,
                "--model",
                str(model),
                "--data",
                str(d),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    got = pd.read_parquet(out)
    assert len(got) == len(df) and {"mean", "moment_2"} <= set(got.columns)
    np.testing.assert_array_equal(got["mean"].to_numpy(), FittedModel.load(model).predict(df)["mean"])
    rep = tmp_path / "audit.json"
    assert (
        main(
            [
                "audit",
                "--engine",
                "dask",
                "--scheduler",
                addr,
                "--model",
                str(model),
                "--data",
                str(d),
                "--label",
                "y",
                "--out",
                str(rep),
            ]
        )
        == 0
    )
    tables = json.loads(rep.read_text())
    assert tables["n"] == len(df) and tables["by_group"]["count"][0] == len(df)


@pytest.mark.parametrize("case", ["no-match", "schemas", "scheduler"])
def test_cli_bad_input_one_line_exit_2_nothing_written(tmp_path, capsys, case):
    from app.cli import dask as cli_dask
    from app.cli.entry import main

    assert cli_dask.SCHEDULER_TIMEOUT < 30  # an unreachable scheduler is reported within 30 s (no clock here)

    d = tmp_path / "d"
    d.mkdir()
    pd.DataFrame({"g": [1, 2], "y": [1.0, 2.0]}).to_parquet(d / "a.parquet")
    pd.DataFrame({"g": ["x", "y"], "y": [1.0, 2.0]}).to_parquet(d / "b.parquet")
    out = tmp_path / "m.json"
    args = ["fit", "--engine", "dask", "--label", "y", "--out", str(out)]
    if case == "no-match":
        args += ["--data", str(tmp_path / "nothing" / "*.parquet")]
    elif case == "schemas":
        args += ["--data", str(d / "*.parquet")]
    else:
        args += ["--data", str(d / "a.parquet"), "--scheduler", "tcp://127.0.0.1:9"]
    assert main(args) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("mmc: error:")]
    assert len(err) == 1
    assert {
        "no-match": "matches no Parquet files",
        "schemas": "different schemas",
        "scheduler": "no Dask scheduler answers",
    }[case] in err[0]
    assert not out.exists()


def test_recalibrations_the_dask_engine_does_not_fit_are_refused(client):
    df = make_frame(2000)
    with pytest.raises(MMCError, match="base_recalibration='affine' is not supported by the Dask engine"):
        MomentMulticalibrator(base_recalibration="affine").fit(
            split(df), "y", None, base_prediction="base", client=client
        )
    # a misspelt value is an error naming the parameter, as in memory (a review: it fitted as "none")
    with pytest.raises(MMCError, match="base_recalibration must be one of"):
        MomentMulticalibrator(base_recalibration="grouplinear").fit(
            split(df), "y", None, base_prediction="base", client=client
        )
    with pytest.raises(MMCError, match="shrunken_cells must be True or False"):
        MomentMulticalibrator(shrunken_cells="yes").fit(split(df), "y", None, base_prediction="base", client=client)


def test_engine_dask_on_an_in_memory_table_with_arrays(client):
    df = make_frame(4000)
    groups = GroupSet.from_columns(df, ["region", "kind"])
    kw = dict(n_moments=2, calibration_fraction=0.0, max_rounds=2, base_recalibration="none")
    e_np = MomentMulticalibrator(**kw).fit(df, df["y"].to_numpy(), groups, base_prediction=df["base"].to_numpy())
    e_dk = MomentMulticalibrator(**kw).fit(
        df, df["y"].to_numpy(), groups, base_prediction=df["base"].to_numpy(), engine="dask", client=client
    )
    assert e_dk.model_.info["label"] == "label" and e_dk.model_.init_mean == e_np.model_.init_mean
    assert_same_fit(e_np, e_dk, df, df["base"].to_numpy())
    # one plan for both engines: the same rows, stages and bucket counts, and thresholds from the same figures
    p_np, p_dk = e_np.plan_.as_dict(), e_dk.plan_.as_dict()
    t_np, t_dk = p_np.pop("thresholds"), p_dk.pop("thresholds")
    assert p_dk == p_np and p_np["stages"] == ["descent"]
    assert t_dk["5"]["alpha"] == pytest.approx(t_np["5"]["alpha"], rel=1e-9)
    assert t_dk["5"]["beta"] == pytest.approx(t_np["5"]["beta"], rel=1e-9)


def test_audit_tables_are_json_with_null_for_empty_groups(client):
    df = make_frame(4000)
    groups = GroupSet.from_json({"groups": [{"name": "nobody", "where": [{"column": "age", "op": ">", "value": 1e9}]}]})
    est = MomentMulticalibrator(n_moments=2, calibration_fraction=0.0, max_rounds=2).fit(df, df["y"], groups)
    tables = de.audit_tables_dask(est.model_, split(df, [1000, 3000]), "y")
    json.dumps(tables, allow_nan=False)
    assert tables["by_group"]["count"] == [4000, 0] and tables["by_group"]["mean_label"][1] is None


def test_dask_meets_a_given_alpha_and_fits_the_moment_cells_as_numpy(client):
    """Issue 34 on the Dask engine: a given alpha is met on the fitting rows (the per-cell test gates only the
    moments, whose beta is "se"; the cell steps are dropped if they would break it), and with both thresholds
    "se" the descent leaves the variance to the moments' cell step, which runs there as in numpy (its held-out
    rows are split per partition, so the two engines' models differ by their rows; a saved model, whose rounds
    may be banded by the mean, predicts what the fitted one does)."""
    sizes = [5000, 8000, 7000]
    df = make_frame(sum(sizes), seed=11)
    older = (df["age"] >= 55).to_numpy()  # a listed group whose spread is twice the rest's: evidence far past z = 2
    df.loc[older, "y"] += np.random.default_rng(12).normal(size=int(older.sum())) * 0.6
    groups = GroupSet.from_json(GROUPS_JSON)
    kw = dict(alpha=5e-4, n_moments=2)
    e_np = MomentMulticalibrator(**kw).fit(df, df["y"], groups, base_prediction=df["base"], base_name="base")
    e_dk = MomentMulticalibrator(**kw).fit(split(df, sizes), "y", groups, base_prediction="base", client=client)
    for e in (e_np, e_dk):
        assert e.alpha_ <= 5e-4 and e.model_.params.se_scope == "moments"
    assert set(e_dk.model_.info["moment_cells"]) == set(e_np.model_.info["moment_cells"]) == {"2"}
    e_dk = MomentMulticalibrator(n_moments=2).fit(split(df, sizes), "y", groups, base_prediction="base", client=client)
    m = e_dk.model_
    assert m.params.z_moment >= 0 and e_dk.moment_updates_ == 0
    assert m.moment_cells, m.info["moment_cells"]
    again = FittedModel.from_json(m.to_json())
    base = df["base"].to_numpy()
    np.testing.assert_array_equal(again.predict(df, base)["moment_2"], m.predict(df, base)["moment_2"])


def _tiny_parts(tmp_path, **changes):
    """A 400-row Parquet folder (and its fitted numpy model) where ``changes`` set one cell: {column: value}."""
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"g": rng.integers(0, 2, 400), "p": rng.normal(size=400)})
    df["y"] = df["p"] + rng.normal(size=400)
    model = tmp_path / "m.json"
    MomentMulticalibrator(n_moments=2, calibration_fraction=0.0, max_rounds=2).fit(
        df, df["y"], GroupSet.from_columns(df, ["g"]), base_prediction=df["p"].to_numpy()
    ).save(model)
    for col, v in changes.items():
        df.loc[7, col] = v
    d = tmp_path / "d"
    d.mkdir()
    df.to_parquet(d / "a.parquet")
    return d, model


@pytest.mark.parametrize("command", ["predict", "audit"])
def test_cli_non_finite_base_is_refused_as_by_the_numpy_engine(client, tmp_path, capsys, command):
    from app.cli.entry import main

    d, model = _tiny_parts(tmp_path, p=np.inf)
    out = tmp_path / ("pred" if command == "predict" else "audit.json")
    args = [command, "--engine", "dask", "--scheduler", client.scheduler.address, "--model", str(model)]
    args += ["--data", str(d), "--pred", "p", "--out", str(out)] + (["--label", "y"] if command == "audit" else [])
    assert main(args) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("mmc: error:")]
    # refused from the Parquet footer's statistics, before the cluster is asked (issue 38)
    assert len(err) == 1 and "prediction column 'p' has infinite value(s) (a.parquet" in err[0]
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-mmc-")]


@pytest.mark.parametrize("command", ["fit", "predict", "audit"])
def test_cli_zero_rows_are_refused_before_the_cluster_starts(tmp_path, capsys, command):
    from app.cli.entry import main

    d, model = _tiny_parts(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    pd.read_parquet(d / "a.parquet").iloc[:0].to_parquet(empty / "a.parquet")
    out = tmp_path / ("pred" if command == "predict" else "out.json")
    args = [command, "--engine", "dask", "--data", str(empty), "--out", str(out), "--pred", "p"]
    args += ["--label", "y"] if command != "predict" else []
    args += ["--model", str(model)] if command != "fit" else []
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "no data rows" in err and "starting a local Dask cluster" not in err
    assert not out.exists()


def test_cli_memory_limit_is_checked_when_parsed(tmp_path, capsys):
    from app.cli.entry import main

    d, _ = _tiny_parts(tmp_path)
    args = ["fit", "--engine", "dask", "--data", str(d), "--label", "y", "--out", str(tmp_path / "m2.json")]
    assert main(args + ["--memory-limit", "lots"]) == 2
    err = capsys.readouterr().err
    assert "'lots' is not a memory size" in err and "Traceback" not in err


@pytest.mark.slow
def test_cli_bad_label_on_a_local_cluster_is_one_line_without_worker_tracebacks(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    d, model = _tiny_parts(tmp_path, y=np.nan)
    # the NaN stored as a number, not as null: the footer's statistics do not show it (a missing value they show is
    # refused before the cluster starts), so the worker finds it
    t = pd.read_parquet(d / "a.parquet")
    pq.write_table(pa.table({c: pa.array(t[c].to_numpy(), from_pandas=False) for c in t.columns}), d / "a.parquet")
    out = tmp_path / "audit.json"
    args = ["audit", "--engine", "dask", "--workers", "1", "--memory-limit", "1GB", "--model", str(model)]
    args += ["--data", str(d), "--pred", "p", "--label", "y", "--out", str(out)]
    res = subprocess.run([sys.executable, "-m", "app.cli", *args], capture_output=True, text=True, timeout=300)
    assert res.returncode == 2, res.stderr
    # the in-memory engine's own line: the count over every partition and the row in the whole table
    assert "Traceback" not in res.stderr
    assert "label column 'y' has 1 missing or infinite value(s) (first in data row" in res.stderr
    assert not out.exists()


def test_compare_on_dask_is_the_numpy_comparison(client, tmp_path):
    """The same sums on 7 unequal partitions: every per-group number as the in-memory comparison (sides without
    intervals: the Dask engine predicts none), and the same findings."""
    from mmc_core.comparison.compare_models import Side, compare
    from mmc_core.engines.dask_engine import compare_dask

    df = make_frame(30000)
    gs = GroupSet.from_columns(df, ["region", "kind"], 2)
    est = MomentMulticalibrator(n_moments=2, calibration_fraction=0.0, max_rounds=3).fit(df, df["y"], gs)
    model = est.model_
    d = _parquet_dir(tmp_path, df.assign(crude=df["y"].mean()), [3000, 9000, 1000, 7000, 4000, 2000, 4000])
    ddf = dd.read_parquet(str(d))
    got = compare_dask(ddf, "y", [("model", model, "model"), ("column", "crude", "crude")], gs)
    pred = model.predict(df)
    want = compare(
        df,
        df["y"].to_numpy(),
        Side("model", pred["mean"], pred["moment_2"]),
        Side("crude", np.full(len(df), df["y"].mean())),
        gs,
    )
    cols = [c for c in want.by_group.columns if not c.startswith(("coverage", "width"))]
    # sums are shifted by the first partition's means on Dask, by the whole table's in memory: covariances agree
    # to rounding of the larger of the two (a standard error of 1e-9 can differ by 1e-9)
    np.testing.assert_allclose(
        got.by_group[cols].to_numpy(float), want.by_group[cols].to_numpy(float), rtol=1e-7, atol=1e-8
    )
    assert [(f["group"], f["kind"]) for f in got.findings] == [(f["group"], f["kind"]) for f in want.findings]
    assert got.findings and got.worse()  # the constant is worse than the model somewhere


def test_periods_on_dask_are_the_numpy_periods(client, tmp_path):
    from mmc_core.comparison.compare_models import Side, compare_periods
    from mmc_core.engines.dask_engine import periods_dask

    df = make_frame(24000)
    df["quarter"] = np.array(["2026Q1", "2026Q2", "2026Q3"])[np.arange(len(df)) % 3]
    gs = GroupSet.from_columns(df, ["region", "kind"])
    model = MomentMulticalibrator(n_moments=2, calibration_fraction=0.0, max_rounds=3).fit(df, df["y"], gs).model_
    d = _parquet_dir(tmp_path, df, [5000, 9000, 4000, 6000])
    got = periods_dask(model, dd.read_parquet(str(d)), "y", "quarter")
    pred = model.predict(df)
    want = compare_periods(df, df["y"].to_numpy(), Side("the model", pred["mean"], pred["moment_2"]), gs, df["quarter"])
    assert got.periods == want.periods == ["2026Q1", "2026Q2", "2026Q3"]
    num = [c for c in want.changes.columns if c not in ("group", "period", "reference")]
    np.testing.assert_allclose(
        got.changes[num].to_numpy(float), want.changes[num].to_numpy(float), rtol=1e-7, atol=1e-8
    )
    assert [(f["group"], f["kind"]) for f in got.findings] == [(f["group"], f["kind"]) for f in want.findings]


def _idle_cluster():
    """An in-process cluster with no workers yet (threads: nothing to spawn, no memory monitor)."""
    import logging

    cluster = distributed.LocalCluster(
        n_workers=0, processes=False, dashboard_address=None, memory_limit=0, silence_logs=logging.CRITICAL
    )
    return cluster, distributed.Client(cluster)


def test_a_fit_waits_for_a_starting_clusters_first_worker():
    # a cluster just created, or scaling up from none, reports no workers for a moment: the fit waits for one
    # (it stopped with "no workers" at once, which CI hit with a new LocalCluster used at once)
    import threading

    df = make_frame(4000, seed=5)
    cluster, client = _idle_cluster()
    try:
        timer = threading.Timer(1.0, cluster.scale, [1])
        timer.start()
        est = MomentMulticalibrator(n_moments=1).fit(
            dd.from_pandas(df, npartitions=2), "y", GroupSet.from_columns(df, ["region", "kind"]), client=client
        )
        timer.join()
        assert est.model_ is not None and len(client.scheduler_info()["workers"]) == 1
    finally:
        client.close()
        cluster.close()


def test_a_cluster_without_workers_gets_a_clear_error(monkeypatch):
    from mmc_core.engines import dask_parts

    monkeypatch.setattr(dask_parts, "WORKER_WAIT_SECONDS", 1)
    df = make_frame(2000, seed=6)
    cluster, client = _idle_cluster()
    try:
        with pytest.raises(MMCError, match=r"no workers \(waited 1 s"):
            MomentMulticalibrator(n_moments=1).fit(
                dd.from_pandas(df, npartitions=2), "y", GroupSet.from_columns(df, ["region", "kind"]), client=client
            )
    finally:
        client.close()
        cluster.close()
