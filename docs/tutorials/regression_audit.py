"""Tutorial: audit a wage regression on the bundled ISLR `Wage` table.

Fit a plain base model, multicalibrate its mean and variance on race, education, marital status and age,
then audit both on rows neither was fitted on.
"""

import numpy as np
from sklearn.linear_model import LinearRegression

from app.services.demo_data import load_dataset
from mmc_core import GroupSet, MomentMulticalibrator, audit

df = load_dataset("islp_wage")  # 3,000 rows, label `wage`
rng = np.random.default_rng(0)
order = rng.permutation(len(df))
base_rows, fit_rows, test_rows = order[:1000], order[1000:2200], order[2200:]

# 1. A base model: wage on year and age, fitted on its own rows.
features = ["year", "age"]
base_model = LinearRegression().fit(df.iloc[base_rows][features], df.iloc[base_rows]["wage"])
df["base_pred"] = base_model.predict(df[features])
train, test = df.iloc[fit_rows].reset_index(drop=True), df.iloc[test_rows].reset_index(drop=True)

# 2. The groups: each value of four columns (age cut at its quartiles), no intersections.
groups = GroupSet.from_columns(train, ["race", "education", "maritl", "age"], max_order=1)

# 3. Multicalibrate the mean and the variance.
est = MomentMulticalibrator(n_moments=2)
est.fit(train, train["wage"], groups, base_prediction=train["base_pred"])
# What each stage changed, on the rows held out of the fit (root mean squared error in dollars).
for stage in est.model_.info["stages"]:
    print(f"{stage['stage']:>13}: held-out RMSE {stage['rmse']:.2f}")

# 4. Audit the base prediction and the fitted model on the test rows.
result = audit(est.model_, test, test["wage"], base=test["base_pred"])
table = result.by_group[["count", "mean_label", "mean_pred_base", "mean_pred", "var_ratio"]]
print(table.round(2).to_string())
# The mean error of each group, before (base) and after multicalibration.
error_base = (table["mean_label"] - table["mean_pred_base"]).abs()
error_after = (table["mean_label"] - table["mean_pred"]).abs()
print(f"mean |group error|: base {error_base.mean():.2f}, multicalibrated {error_after.mean():.2f}")
print("findings:", len(result.findings), "status:", result.findings_status)
