"""Tutorial: audit a loan-approval classifier on the bundled Boston HMDA `loanapp` table.

The label `approve` is 0/1, so the fit and the audit treat the model as a classifier: only the probability of
approval is multicalibrated, and the audit reports calibration, Brier score and the rates at a threshold.
"""

import numpy as np
from sklearn.linear_model import LogisticRegression

from app.services.demo_data import load_dataset
from mmc_core import GroupSet, MomentMulticalibrator, audit

df = load_dataset("loanapp")  # 1,989 applications, label `approve`
df = df.dropna(subset=["male"]).reset_index(drop=True)
rng = np.random.default_rng(0)
order = rng.permutation(len(df))
base_rows, fit_rows, test_rows = order[:600], order[600:1400], order[1400:]

# 1. A base classifier on two debt ratios, fitted on its own rows.
features = ["hrat", "obrat"]
base_model = LogisticRegression().fit(df.iloc[base_rows][features], df.iloc[base_rows]["approve"])
df["base_prob"] = base_model.predict_proba(df[features])[:, 1]
train, test = df.iloc[fit_rows].reset_index(drop=True), df.iloc[test_rows].reset_index(drop=True)

# 2. Groups: each value of four 0/1 columns.
groups = GroupSet.from_columns(train, ["black", "hispan", "male", "married"], max_order=1)

# 3. Multicalibrate the probability of approval (a 0/1 label: the task is detected).
est = MomentMulticalibrator()
est.fit(train, train["approve"], groups, base_prediction=train["base_prob"])
proba = est.predict_proba(test, base_prediction=test["base_prob"])  # (n, 2): P(0), P(1)
print("task:", est.task_, "probabilities:", proba.shape)

# 4. Audit on the test rows: calibration per group, before and after, and the rates at a threshold of 0.8.
result = audit(est.model_, test, test["approve"], base=test["base_prob"], threshold=0.8)
table = result.by_group
columns = ["count", "base_rate", "calib_error_base", "calib_error", "brier_base", "brier", "selection_rate"]
print(table[columns].round(3).to_string())
# calib_error: observed share of approvals minus mean predicted probability, per group.
error_base, error_after = table["calib_error_base"].abs().mean(), table["calib_error"].abs().mean()
print(f"mean |group calibration error|: base {error_base:.3f}, multicalibrated {error_after:.3f}")
# On 800 fitting rows the fit corrects the largest group error (black=1: approvals over-predicted by the base),
# while groups the base had right move on the noise of small samples: audit on fresh rows, as here, to see it.
# Demographic parity and equalized odds per column at the threshold, and the four-fifths rule.
print(result.classifier.disparities[["equalized_odds_ratio", "four_fifths_flagged"]].to_string())
