"""About: the concepts in plain words, and how the pages fit together."""

from __future__ import annotations

import streamlit as st

CONCEPTS = """
**The question.** A model predicts a number for each person: a wage, a test score, a blood pressure.
Is it right *on average* for every group you care about, and does it know *how uncertain* it is for each of them?
A model can be accurate overall and still be systematically off for older women, or equally confident about
everyone while its errors for one group are twice as large.

**Groups.** Named sets of rows defined by conditions on columns (race = B, age in [50, 65), and intersections
such as race = B & sex = F). They may overlap. The whole population (*all*) is always one of them.

**Buckets and cells.** The range of predicted means is cut into *m* buckets. A *cell* is the rows of one group
whose predicted mean falls in one bucket: for example Black women predicted to earn between 80 and 100.
For the variance, cells also fix the bucket of the predicted variance.

**Multicalibrated mean.** In every cell the average prediction matches the average outcome, up to α / P(cell)
(α is mass-weighted, so small cells are allowed proportionally larger errors). This is stronger than
"calibrated overall" and stronger than "calibrated per group".

**Moment multicalibration** (Jung, Lee, Pai, Roth and Vohra, 2021). The same promise for the variance and higher
moments: within every cell, the predicted variance matches the spread of outcomes around the cell's mean.
The cells for the variance also fix the predicted mean: without that, even the true model would fail the test
(see the two-point example on the Teaching page).

**How it is achieved.** Start from a base model's predictions. Repeatedly find the cell with the largest error
and shift the predictions on it (gradient descent on cells). Each shift provably lowers a potential, so the
number of shifts is bounded by 1/α²: the procedure always ends.

**Prediction intervals.** From the calibrated mean and variance the tool builds intervals meant to contain the
outcome with probability 1 − δ *in every group*, not just overall. The Results page compares several ways of
building them: the paper's guaranteed (honest, wide) intervals, plug-in Chebyshev intervals, the paper's
multi-moment cover, intervals calibrated per group on held-out rows, and the usual baselines (split conformal, per-group
"Mondrian" conformal, Gaussian).

**Honest numbers.** The guarantees hold exactly on the rows the model was fitted on. Every figure on the Results
page is computed on *test* rows the fit never saw, so what you see is what to expect on new data. Groups smaller
than γ of the rows are marked † : their numbers are noisy and no guarantee covers them.
"""

WORKFLOW = """
1. **Data**: a demo table or your CSV / Parquet file; the label, its range, and the predictions to audit
   (an existing column, or a model fitted here on separate rows).
2. **Groups**: the groups to audit, built from columns, by hand, or imported from JSON.
3. **Run**: thresholds α, β, buckets m, moments k; watch the descent converge, stop it any time.
4. **Results**: variance disparities, coverage heatmaps, calibration before/after, and any single row.
5. **Export**: a PDF report, predictions with intervals (CSV), the model and the groups (JSON).
"""


def render():
    st.title("About mmc-audit")
    st.markdown(CONCEPTS)
    st.subheader("How the pages fit together")
    st.markdown(WORKFLOW)
    st.subheader("Command line")
    st.code(
        "mmc fit --data train.csv --label wage --pred base --groups groups.json --out model.json\n"
        "mmc predict --model model.json --data new.csv --pred base --interval calibrated --out preds.csv\n"
        "mmc report --model model.json --data test.csv --label wage --pred base --out report.pdf\n"
        "mmc dashboard --data my_table.csv",
        language="bash",
    )
    st.caption(
        "Christopher Jung, Changhwa Lee, Mallesh M. Pai, Aaron Roth and Rakesh Vohra. Moment Multicalibration "
        "for Uncertainty Estimation. COLT 2021, PMLR 134:2634-2678. arXiv:2008.08037."
    )


if __name__ == "__main__":
    render()
