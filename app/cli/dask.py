"""``mmc fit|predict|audit --engine dask``: the same commands on partitioned Parquet, on a Dask cluster.

Without ``--scheduler`` a ``distributed.LocalCluster`` of ``--workers`` processes (one thread and
``--memory-limit`` each) is started for the command and closed after it (also on Ctrl-C and on errors); with
``--scheduler ADDRESS`` the command connects to an existing cluster and leaves it running. Bad input (a glob
matching nothing, Parquet files with different schemas, a scheduler that does not answer, a label with a missing
value) is one line on stderr and exit 2, before anything is written and with no progress line before it
(:class:`HeldLines`). An --out that is an input (the model, a groups file, the --data folder or one of its files)
is refused by :func:`app.cli.common.refuse_output_over_input` before the engine is chosen. `predict --out` writes
what the in-memory engine writes to the same name: one Parquet file to a .parquet or .pq name
(:func:`app.services.io.write_parquet_parts`), one CSV file to any other file name (:func:`app.services.io.write_csv_parts`);
a folder of Parquet files, one per partition, only to a name ending in "/" or an empty folder (:func:`out_form`).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import threading
import time
from contextlib import contextmanager

SCHEDULER_TIMEOUT = 10  # seconds: an unreachable --scheduler is reported well within 30 s
PROGRESS_HOLD = 10.0  # seconds: progress lines wait this long for the work to start (a bad input: one line only)
MIN_MEMORY_LIMIT = 256 * 10**6  # bytes a local worker needs at least (at 100MB or 1KB the cluster never answered)
WORKERS_PER_CPU = 4  # local worker processes per CPU at most (1,000 of them took the machine's memory)


class HeldLines:
    """The progress lines of a Dask command on stderr, held back until the work has truly started: a bad input
    found only on the cluster (a label with a missing value, a text prediction column, a constant label) is then
    the one line the user sees, as on the in-memory engine, not "starting a local Dask cluster" and "fitting"
    first. The lines are shown when :meth:`start` is called (the rows passed the checks: the descent's first
    round) or once PROGRESS_HOLD seconds have passed (a long start still says what it is doing); a block that ends
    before, with an error, Ctrl-C or quickly done, drops them (a quick command says nothing, as in memory)."""

    def __init__(self, hold: float | None = None):
        self._lock = threading.Lock()
        self._lines: list = []
        self._state = "held"  # -> "shown" or "dropped"
        self._timer = threading.Timer(PROGRESS_HOLD if hold is None else hold, self.start)
        self._timer.daemon = True

    def __enter__(self):
        self._timer.start()
        return self

    def __exit__(self, *exc):
        self._timer.cancel()
        with self._lock:
            if self._state == "held":
                self._state, self._lines = "dropped", []
        return False

    def say(self, line: str) -> None:
        with self._lock:
            if self._state == "shown":
                print(line, file=sys.stderr, flush=True)
            elif self._state == "held":
                self._lines.append(line)

    def start(self) -> None:
        """Show the held lines, and every later one as it comes."""
        with self._lock:
            if self._state != "held":
                return
            self._state = "shown"
            for line in self._lines:
                print(line, file=sys.stderr, flush=True)
            self._lines = []


@contextmanager
def dask_session(args, lines: HeldLines | None = None):
    """A Dask client for the command (see the module docstring); its progress lines go through ``lines`` (held
    until the work starts: :class:`HeldLines`; a block of its own when not given)."""
    from mmc_core.engines import close_client, start_client

    if lines is None:
        with HeldLines() as own, dask_session(args, own) as client:
            yield client
        return
    if args.scheduler:
        lines.say(f"mmc: connecting to the Dask scheduler at {args.scheduler}")
    else:
        lines.say(f"mmc: starting a local Dask cluster: {args.workers} worker process(es), {args.memory_limit} each")
    client, cluster = start_client(args.scheduler, args.workers, args.memory_limit, SCHEDULER_TIMEOUT)
    try:
        yield client
    finally:
        close_client(client, cluster)


def _first_bad(df, col):
    """(rows, missing or infinite values, position of the first within the partition or -1) of ``col``."""
    import numpy as np
    import pandas as pd

    s = df[col]
    if not (pd.api.types.is_numeric_dtype(s) or pd.api.types.is_bool_dtype(s)):
        return len(df), 0, -1  # text: the workers' own message stands
    bad = ~np.isfinite(s.to_numpy(dtype=float, na_value=np.nan))
    return len(df), int(bad.sum()), int(np.flatnonzero(bad)[0]) if bad.any() else -1


@contextmanager
def table_rows(ddf, columns):
    """Within a Dask session: a worker's "missing or infinite value(s) (first at row 3)" counts within its
    partition; it is replaced by the in-memory engine's message for the same table (the count over every
    partition, "first in data row N" counted from 1 over the --data files in order), checked by one more pass
    over ``columns`` ((role, name) pairs, in the order the in-memory command checks them) on that failure only."""
    from mmc_core.common import DataError

    try:
        yield
    except DataError as e:
        if "missing or infinite" not in str(e):
            raise
        import dask

        for role, col in columns:
            if not col or col not in ddf.columns:
                continue
            parts = dask.compute(*[dask.delayed(_first_bad)(d, col) for d in ddf[[col]].to_delayed()])
            n, bad, first, offset = sum(p[0] for p in parts), sum(p[1] for p in parts), -1, 0
            for rows, _, pos in parts:
                if pos >= 0 and first < 0:
                    first = offset + pos
                offset += rows
            if bad and bad == n:
                raise DataError(f"{role} '{col}' has no usable values (all missing)") from None
            if bad:
                raise DataError(
                    f"{role} '{col}' has {bad} missing or infinite value(s) (first in data row {first + 1}); "
                    "drop or fill them first"
                ) from None
        raise


def dask_table(args, need, sized=None, groups=()):
    """The Dask DataFrame of --data; ``sized``: the columns the command reads (a partition's memory limit is
    checked on them; default all, as `predict` writes them all); ``groups``: the columns groups read besides the
    group columns of ``need`` (their cells must be single values)."""
    from mmc_core.engines import read_parquet

    from .common import CLIError

    # a label or prediction with a missing or infinite value, a period column with a missing one: refused from
    # the files' statistics before any cluster starts (group columns may miss values)
    complete = {col: (what, what != "period column") for what, col in need if col and what != "group column"}
    scalar = {col: what for what, col in need if col and what == "group column"}
    scalar.update({col: "group column" for col in groups if col not in scalar})
    ddf = read_parquet(args.data, sized_columns=sized, complete=complete, scalar=scalar)
    for what, col in need:
        if col and col not in ddf.columns:
            raise CLIError(f"{what} '{col}' is not in the data")
    return ddf


def fit(args) -> int:
    _check_fit_args(args)
    ddf, extra = _fit_table(args)
    from app.cli.common import StopOnCtrlC, estimator_from_args

    est = estimator_from_args(args, task=args.task)  # "auto" or "regression": a classifier was refused above
    started = time.monotonic()

    lines = HeldLines()

    def progress(row) -> bool:  # one line per round on stderr; the first round: the rows passed every check
        lines.start()
        lines.say(
            f"mmc: round {row['round']}: {row['violating_cells']} violating mean cell(s), "
            f"{row['mean_updates']} mean / {row['moment_updates']} moment updates, "
            f"{time.monotonic() - started:.0f} s"
        )
        return False

    checked = [("label column", args.label), ("prediction column", args.pred)]
    with lines, StopOnCtrlC() as intr, dask_session(args, lines) as client, table_rows(ddf, checked):
        groups = _fit_groups(args, ddf, extra, client)
        lines.say(
            f"mmc: fitting {ddf.npartitions} partition(s) x {len(groups):,} groups on Dask (Ctrl-C stops "
            "before the next update)"
        )
        est.fit(
            ddf,
            args.label,
            groups,
            base_prediction=args.pred,
            label_name=args.label,
            base_name=args.pred,
            stop=lambda: intr.hit,
            callback=progress,
            engine="dask",
            client=client,
        )
    info = est.model_.info
    if intr.hit:
        print(f"mmc: interrupted after {info['rounds']} round(s); the model is NOT converged", file=sys.stderr)
        if not args.save_partial:
            print("mmc: nothing was written (use --save-partial to keep a partial model)", file=sys.stderr)
            return 130
    est.save(args.out)
    from ..figures.figure_style import interval_text

    if est.label_scale_.source == "observed":
        print(
            f"note: label range taken from the data: {interval_text(est.label_scale_.lo, est.label_scale_.hi, 6)} "
            "(pass --label-range LO,HI to declare it)",
            file=sys.stderr,
        )
    print(json.dumps(_fit_summary(args, est)))
    return 0


def _check_fit_args(args) -> None:
    """The options of `mmc fit` the Dask engine refuses or checks before it reads anything."""
    from .common import CLIError, check_out

    check_out(args.out)
    if args.discover:
        raise CLIError("--discover is not supported with --engine dask (run `mmc discover` on a sample)")
    if args.task == "binary" or args.positive:
        # the Dask engine fits the label as a number; silently fitting a regression where the user asked for a
        # classifier would hand back a model of the wrong kind
        flag = "--task binary" if args.task == "binary" else "--positive"
        raise CLIError(
            f"{flag}: classifier fits run in memory only (drop --engine dask); the Dask engine fits regressions"
        )
    if args.max_order < 1:
        raise CLIError(f"--max-order must be >= 1, got {args.max_order}")
    for c in args.group_cols:
        if c == args.label:
            raise CLIError(f"the label '{c}' cannot define groups (groups must be computable on new rows)")


def _fit_table(args):
    """The Dask DataFrame of the columns the fit uses (the others could take gigabytes) and the --groups file's
    groups (or None), their columns checked against the files."""
    from mmc_core import GroupSet

    from .common import CLIError

    need = [("label column", args.label), ("prediction column", args.pred)] + [
        ("group column", c) for c in args.group_cols
    ]
    extra = None
    if args.groups:
        extra = GroupSet.from_file(args.groups)  # bounded: size, depth, numbers (mmc_core.common.jsonfile), then schema
    ddf = dask_table(args, need, sized=[c for _, c in need if c], groups=extra.columns() if extra else ())
    if ddf[args.label].dtype == bool:  # in memory a classifier: a regression here would be a model of another kind
        raise CLIError(
            f"label column '{args.label}' holds true/false values: a classifier's label; classifier fits run in "
            "memory only (drop --engine dask)"
        )
    if extra is not None:
        for col in extra.columns():
            if col not in ddf.columns:
                raise CLIError(f"group file {args.groups} refers to column '{col}', which is not in the data")
    # only the columns the fit uses are read from the files (the others could take gigabytes)
    used = [c for _, c in need if c] + (list(extra.columns()) if extra is not None else [])
    return ddf[list(dict.fromkeys(used))], extra


def _fit_groups(args, ddf, extra, client):
    """The groups of --group-cols (exact quartile cuts computed on the cluster) and of --groups."""
    from mmc_core import GroupSet
    from mmc_core.engines import groups_from_columns

    groups = (
        groups_from_columns(ddf, args.group_cols, args.max_order, client=client) if args.group_cols else GroupSet([])
    )
    if extra is not None:
        groups = groups + extra
    return groups


def _fit_summary(args, est) -> dict:
    """The one-line JSON `mmc fit --engine dask` prints last."""
    info = est.model_.info
    summary = {k: info[k] for k in ("rounds", "mean_updates", "moment_updates", "seconds", "converged", "n_groups")}
    summary.update(
        alpha=est.alpha_,
        beta=est.beta_ if est.model_.moments else None,  # a mean-only model has no moment threshold
        kept_round=info["kept_round"],
        n_fit=info["n_fit"],
        n_calibration=info["n_calibration"],
        label_range=[est.label_scale_.lo, est.label_scale_.hi],
        engine=info["engine"],
        model=args.out,
    )
    return summary


def out_form(path) -> str:
    """What `mmc predict --engine dask --out PATH` writes: "folder" (one Parquet file per partition) for a name
    ending in "/" or an existing folder not named like a file, else what the in-memory engine writes to that name,
    "parquet" (one file) for .parquet / .pq and "csv" (one file) for any other name (an existing folder named so is
    then refused as the in-memory engine refuses it). A name without an extension wrote a folder: a user who names a
    file expects that file, and the in-memory engine wrote a CSV there."""
    from ..services.io import PARQUET_SUFFIXES

    p = str(path)
    as_file = p.lower().endswith((".csv", *PARQUET_SUFFIXES))
    if p.endswith(("/", os.sep)) or (os.path.isdir(p) and not as_file):
        return "folder"
    return "parquet" if p.lower().endswith(PARQUET_SUFFIXES) else "csv"


def computed_partitions(client, ddf, ahead: int | None = None):
    """The partitions of ``ddf`` as pandas DataFrames, in order, computed on the cluster ``ahead`` at a time
    (default: two per worker) so that the workers stay busy while the client writes, and at most ``ahead``
    partitions are held at once."""
    from collections import deque

    if ahead is None:
        ahead = 2 * max(1, len(client.scheduler_info().get("workers", {})))
    parts = iter(ddf.to_delayed())
    queue: deque = deque()
    try:
        while True:
            while len(queue) < ahead:
                nxt = next(parts, None)
                if nxt is None:
                    break
                queue.append(client.compute(nxt))
            if not queue:
                return
            fut = queue.popleft()
            df = fut.result()
            fut.release()
            yield df
    finally:
        for fut in queue:
            fut.cancel()


def _check_out_dir(path):
    from .common import CLIError

    bare = path.rstrip("/") or path  # "x.csv/" names the file x.csv, which the rename would meet
    parent = os.path.dirname(os.path.abspath(bare))
    if not os.path.isdir(parent):
        raise CLIError(f"output folder does not exist: {parent}")
    if os.path.lexists(bare) and (not os.path.isdir(bare) or os.path.islink(bare) or os.listdir(bare)):
        raise CLIError(
            f"--out {path} exists and is not an empty folder (predictions are written as one CSV file to a file "
            "name, one Parquet file to a name ending in .parquet or .pq, or a folder of Parquet files to a name "
            "ending in / or an empty folder)"
        )


def predict(args) -> int:
    from mmc_core import FittedModel
    from mmc_core.engines import predict_dask

    from .common import CLIError, check_out, prediction_columns, refuse_overwrite

    form = out_form(args.out)
    if form == "folder":
        _check_out_dir(args.out)
    else:  # one file, as the in-memory engine writes it
        check_out(args.out)
    if args.interval:
        raise CLIError(
            "--interval is not supported with --engine dask yet (predict the mean and moments, or use the numpy engine)"
        )
    model = FittedModel.load(args.model)
    ddf = dask_table(
        args, [("prediction column", args.pred if model.uses_base else None)], groups=model.groups.columns()
    )
    missing = sorted(c for c in model.input_columns() if c not in ddf.columns)
    if missing:
        raise CLIError(f"the data lacks column(s) the model needs: {', '.join(missing)}")
    if model.uses_base and not args.pred:
        col = model.init_mean.get("column")
        raise CLIError(f"this model was fitted on a base prediction{f' ({col})' if col else ''}: pass --pred COL")
    refuse_overwrite(ddf.columns, prediction_columns(model))
    base_col = args.pred if model.uses_base else None
    if form != "folder":
        from ..services.io import write_csv_parts, write_parquet_parts

        with dask_session(args) as client, table_rows(ddf, [("prediction column", base_col)]):
            # Ctrl-C or an error: the temporary file is removed, nothing written
            pred = predict_dask(model, ddf, base_col)
            parts = computed_partitions(client, pred)
            if form == "csv":
                rows = write_csv_parts(parts, args.out)
            else:
                rows = write_parquet_parts(parts, args.out, pred._meta)
        print(json.dumps({"out": args.out, "partitions": ddf.npartitions, "rows": rows}))
        return 0
    out = args.out.rstrip("/")
    tmp = tempfile.mkdtemp(prefix=".tmp-mmc-", dir=os.path.dirname(os.path.abspath(out)))
    try:
        # mkdtemp's 0700 is too private: the folder gets the mode of a plainly created one (0777 minus the
        # umask), as the in-memory engine's files get 0666 minus the umask (mmc_core.fit.model._default_mode)
        os.chmod(tmp, _folder_mode())
        # Ctrl-C aborts (KeyboardInterrupt): the cluster is closed, nothing is written
        with dask_session(args), table_rows(ddf, [("prediction column", base_col)]):
            predict_dask(model, ddf, base_col).to_parquet(tmp, write_index=False)
        if os.path.isdir(out):
            os.rmdir(out)  # empty (checked above)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    print(json.dumps({"out": out, "partitions": ddf.npartitions}))
    return 0


def _folder_mode() -> int:
    """The mode ``mkdir`` would give a folder: 0777 minus the umask."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o777 & ~mask


def audit(args) -> int:
    from mmc_core import FittedModel
    from mmc_core.engines import audit_tables_dask
    from mmc_core.fit import atomic_write_text

    from .common import CLIError, check_out

    check_out(args.out)
    model = FittedModel.load(args.model)
    need = [("label column", args.label), ("prediction column", args.pred if model.uses_base else None)]
    need += [("period column", getattr(args, "period", None))]
    ddf = dask_table(
        args, need, sized=[c for _, c in need if c] + list(model.input_columns()), groups=model.groups.columns()
    )
    missing = sorted(c for c in model.input_columns() if c not in ddf.columns)
    if missing:
        raise CLIError(f"the data lacks column(s) the model needs: {', '.join(missing)}")
    method = None
    if getattr(args, "period", None):
        from mmc_core.intervals import available_methods

        # as in memory (app.cli.compare.period_result): the calibrated intervals when the model has them
        method = "calibrated" if "calibrated" in available_methods(model) else None
    checked = [("prediction column", args.pred if model.uses_base else None), ("label column", args.label)]
    with dask_session(args), table_rows(ddf, checked):
        tables = audit_tables_dask(model, ddf, args.label, args.pred if model.uses_base else None)
        if getattr(args, "period", None):
            from mmc_core.engines import periods_dask

            from .common import period_threshold

            per = periods_dask(
                model,
                ddf,
                args.label,
                args.period,
                args.pred if model.uses_base else None,
                method=method,
                threshold=period_threshold(args, model),
                delta=args.delta,
                min_group_count=args.min_group_count,
                error_control=args.error_control,
            )
            tables["periods"] = per.to_json()
            for f in per.findings[:10]:
                print(f"- {f['text']}", file=sys.stderr)
    atomic_write_text(args.out, json.dumps(tables, allow_nan=False))
    print(json.dumps({"n": tables["n"], "achieved": tables["achieved"], "engine": "dask", "out": args.out}))
    return 0


def _memory_limit(text: str) -> str:
    """--memory-limit as Dask reads it ("6GB", "500MiB", "auto"), checked when the options are parsed."""
    import argparse
    import re

    if text == "auto":
        return text
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(?:([kKmMgGtTpP])(i?))?[bB]?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a memory size (e.g. 6GB, 500MiB or auto)")
    # as Dask reads it (dask.utils.parse_bytes): kB = 1000, KiB = 1024, a bare number is bytes
    power = "kmgtp".index(m.group(2).lower()) + 1 if m.group(2) else 0
    size = float(m.group(1)) * (1024 if m.group(3) else 1000) ** power
    if size < MIN_MEMORY_LIMIT:
        raise argparse.ArgumentTypeError(
            f"{text!r} is too little memory for a Dask worker: give at least {MIN_MEMORY_LIMIT // 10**6}MB "
            "(e.g. 6GB, 500MiB or auto)"
        )
    return text


def _workers(text: str) -> int:
    """--workers: a positive integer, at most WORKERS_PER_CPU per CPU of this machine (checked when parsed,
    before any cluster starts)."""
    import argparse

    cpus = os.cpu_count() or 1
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    if n > WORKERS_PER_CPU * cpus:
        raise argparse.ArgumentTypeError(
            f"{n} local worker processes is more than {WORKERS_PER_CPU} per CPU (this machine has {cpus}); "
            "use fewer, or --scheduler for a larger cluster"
        )
    return n


def add_engine_options(p):
    """--engine, --scheduler, --workers, --memory-limit (fit, predict, audit)."""
    from .common import choice_option

    choice_option(
        p, "--engine", ["numpy", "dask"], "numpy (default: in memory) or dask (--data is then a Parquet glob or folder)"
    )
    p.add_argument(
        "--scheduler",
        help="with --engine dask: address of a running Dask scheduler (tcp://HOST:8786); "
        "default: start a local cluster for this command",
    )
    p.add_argument(
        "--workers",
        type=_workers,
        default=2,
        help="with --engine dask and no --scheduler: local worker processes (default 2)",
    )
    p.add_argument(
        "--memory-limit",
        type=_memory_limit,
        default="6GB",
        help="with --engine dask and no --scheduler: memory per local worker (default 6GB)",
    )
