"""MomentMulticalibrator in scikit-learn's model selection: the base prediction and the groups as constructor
parameters (``base_column``, ``groups``) so that Pipeline, cross_val_score and GridSearchCV need only X and y;
predict_proba of shape (n, 2); NotFittedError; keyword-only parameters. On the synthetic distribution whose
true conditional mean is known (mmc_core.common.synthetic.demo_distribution)."""

from __future__ import annotations

import copy
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError as SklearnNotFittedError
from sklearn.metrics import r2_score
from sklearn.model_selection import GridSearchCV, KFold, cross_val_score
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer
from sklearn.utils.validation import check_is_fitted

from mmc_core import GroupSet, MomentMulticalibrator, NotFittedError
from mmc_core.common.errors import MMCError
from mmc_core.common.synthetic import demo_distribution

DIST = demo_distribution()
FEATURES = ["sex", "race", "age", "score"]
GROUP_COLS = ["sex", "race", "age"]


def with_base(X: pd.DataFrame) -> pd.DataFrame:
    """A pipeline's first step: the (mis-specified) base model's prediction as a column, in label units."""
    lo, hi = DIST.label_range
    return X.assign(base_pred=lo + (hi - lo) * DIST.base_prediction({c: X[c].to_numpy() for c in FEATURES}))


@pytest.fixture(scope="module")
def table():
    df = pd.DataFrame(DIST.sample_table(3000, np.random.default_rng(5), truth=True))
    return df[FEATURES], df["outcome"], df["true_mean"]


def _estimator(**kw):
    return MomentMulticalibrator(base_column="base_pred", groups=GROUP_COLS, label_range=(0, 100), **kw)


def _mse(a, b) -> float:
    return float(np.mean((np.asarray(a) - np.asarray(b)) ** 2))


def test_constructor_inputs_give_the_model_of_the_fit_arguments(table):
    X, y, _ = table
    Xb = with_base(X)
    by_params = _estimator(max_order=2).fit(Xb, y)
    by_args = MomentMulticalibrator(label_range=(0, 100)).fit(
        Xb, y, GroupSet.from_columns(Xb, GROUP_COLS, 2), base_prediction=Xb["base_pred"], base_name="base_pred"
    )
    a, b = copy.deepcopy(by_params.model_.to_dict()), copy.deepcopy(by_args.model_.to_dict())
    for d in (a, b):
        d["info"].pop("seconds")
        d["info"].pop("estimator_params")
        for h in d["info"]["history"]:
            h.pop("seconds", None)
    assert a == b
    np.testing.assert_array_equal(by_params.predict(Xb), by_args.predict(Xb, Xb["base_pred"]))
    assert by_params.n_features_in_ == 5 and list(by_params.feature_names_in_) == FEATURES + ["base_pred"]
    assert by_params.model_.info["estimator_params"]["base_column"] == "base_pred"


def test_fit_arguments_win_over_the_constructor(table):
    X, y, _ = table
    Xb = with_base(X)
    only_sex = GroupSet.from_columns(Xb, ["sex"], 1)
    other_base = np.full(len(Xb), 50.0)
    est = _estimator().fit(Xb, y, only_sex, base_prediction=other_base)
    plain = MomentMulticalibrator(label_range=(0, 100)).fit(Xb, y, only_sex, base_prediction=other_base)
    assert est.groups_.names == plain.groups_.names
    np.testing.assert_array_equal(est.predict(Xb, other_base), plain.predict(Xb, other_base))
    # without the argument, predict reads base_column: here not the base the model was fitted on
    assert not np.array_equal(est.predict(Xb), est.predict(Xb, other_base))


def test_pipeline_and_cross_val_score_match_fitting_each_fold_by_hand(table):
    X, y, truth = table
    pipe = Pipeline([("base", FunctionTransformer(with_base)), ("mmc", _estimator())])
    cv = KFold(3, shuffle=True, random_state=0)
    scores = cross_val_score(pipe, X, y, cv=cv)
    by_hand = []
    for train, test in cv.split(X):
        Xtr, Xte = with_base(X.iloc[train]), with_base(X.iloc[test])
        est = MomentMulticalibrator(label_range=(0, 100)).fit(
            Xtr, y.iloc[train], GroupSet.from_columns(Xtr, GROUP_COLS, 1), base_prediction=Xtr["base_pred"]
        )
        by_hand.append(r2_score(y.iloc[test], est.predict(Xte, Xte["base_pred"])))
    np.testing.assert_allclose(scores, by_hand, rtol=0, atol=1e-12)
    assert np.all(np.isfinite(scores)) and np.all(scores > 0.3)
    # the fitted pipeline is closer to the true conditional mean than the base model it starts from
    pipe.fit(X, y)
    base = with_base(X)["base_pred"]
    assert _mse(pipe.predict(X), truth) < 0.5 * _mse(base, truth)
    assert pipe.score(X, y) == pytest.approx(r2_score(y, pipe.predict(X)))


def test_grid_search_over_n_buckets(table):
    X, y, truth = table
    Xb = with_base(X)
    grid = GridSearchCV(_estimator(), {"n_buckets": [3, 5, 10]}, cv=3).fit(Xb, y)
    assert grid.best_params_["n_buckets"] in (3, 5, 10)
    means = grid.cv_results_["mean_test_score"]
    assert np.all(np.isfinite(means)) and grid.best_score_ == pytest.approx(means.max())
    best = grid.best_estimator_
    assert best.n_buckets_ == grid.best_params_["n_buckets"]
    pred = best.predict(Xb)
    assert pred.shape == (len(Xb),) and np.all(np.isfinite(pred))
    assert _mse(pred, truth) < 0.5 * _mse(Xb["base_pred"], truth)


def test_binary_predict_proba_has_two_columns_in_the_order_of_classes(table):
    X, y, _ = table
    Xb = with_base(X)
    label = np.where(y > y.median(), "yes", "no")
    Xb["p"] = np.clip(Xb["base_pred"] / 100, 0, 1)
    est = MomentMulticalibrator(base_column="p", groups=GROUP_COLS, positive_label="yes").fit(Xb, label)
    assert list(est.classes_) == ["no", "yes"]
    proba = est.predict_proba(Xb)
    assert proba.shape == (len(Xb), 2)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(proba[:, 1], est.predict(Xb))
    accuracy = np.mean(np.where(proba[:, 1] >= 0.5, "yes", "no") == label)
    assert est.score(Xb, label) == pytest.approx(accuracy) and accuracy > 0.6
    # a regression has no predict_proba and no classes_
    reg = _estimator().fit(Xb, y)
    assert not hasattr(reg, "predict_proba") and not hasattr(reg, "classes_")


@pytest.mark.parametrize(
    "method, args",
    [
        ("predict", ()),
        ("predict_moments", ()),
        ("predict_proba", ()),
        ("predict_interval", ()),
        ("score", ([1.0, 2.0],)),
        ("save", ("unused.json",)),
    ],
)
def test_not_fitted_error_names_the_method(method, args):
    est = MomentMulticalibrator()
    X = pd.DataFrame({"a": [1, 2]})
    with pytest.raises(NotFittedError, match=rf"call fit\(\).* before {method}\(\)") as err:
        getattr(est, method)(*((X,) if method != "save" else ()), *args)
    # also scikit-learn's class (once scikit-learn is imported), a ValueError, an AttributeError and an MMCError
    assert isinstance(err.value, (SklearnNotFittedError, ValueError, AttributeError, MMCError))
    assert all(isinstance(err.value, c) for c in (SklearnNotFittedError, ValueError, AttributeError, MMCError))


def test_check_is_fitted_before_and_after_fit(table):
    X, y, _ = table
    est = _estimator()
    with pytest.raises(SklearnNotFittedError):
        check_is_fitted(est)
    est.fit(with_base(X), y)
    check_is_fitted(est)
    with pytest.raises(NotFittedError):
        clone(est).predict(with_base(X))


def test_parameters_are_keyword_only():
    with pytest.raises(TypeError):
        MomentMulticalibrator(0.1)  # type: ignore[misc]
    assert MomentMulticalibrator(alpha=0.1).alpha == 0.1


def test_bad_input_parameters_name_themselves(table):
    X, y, _ = table
    with pytest.raises(MMCError, match="max_order must be an integer >= 1"):
        _estimator(max_order=0).fit(with_base(X), y)
    with pytest.raises(MMCError, match="base_column='nope' is not a column of X"):
        MomentMulticalibrator(base_column="nope").fit(X, y)


def test_a_loaded_model_reads_its_base_column(table, tmp_path):
    X, y, _ = table
    Xb = with_base(X)
    est = _estimator().fit(Xb, y)
    est.save(tmp_path / "m.json")
    loaded = MomentMulticalibrator.load(tmp_path / "m.json")
    assert loaded.base_column == "base_pred" and loaded.groups is None
    np.testing.assert_array_equal(loaded.predict(Xb), est.predict(Xb))


def test_mmc_core_still_does_not_import_sklearn():
    code = (
        "import sys, numpy as np; from mmc_core import MomentMulticalibrator, NotFittedError\n"
        "try:\n    MomentMulticalibrator().predict({'a': np.zeros(2)})\nexcept NotFittedError:\n    pass\n"
        "MomentMulticalibrator(groups=['a']).fit({'a': np.arange(40) % 2}, np.arange(40.0))\n"
        "assert 'sklearn' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
