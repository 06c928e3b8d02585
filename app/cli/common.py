"""What the commands of ``mmc`` share, apart from :mod:`app.cli` so that the command modules
(:mod:`app.cli.fit`, :mod:`app.cli.apply`, :mod:`app.cli.audit`, :mod:`app.cli.discover`, :mod:`app.cli.compare`,
:mod:`app.cli.dask`) and the parser (:mod:`app.cli.parser`) import it without importing the entry point that imports
them: the one user-error type (:class:`CLIError`, one line and exit 2) and that line (:func:`error_line`), the
output checks made before any work (an output that would replace an input, an unwritable folder), the fit options
as estimator parameters, the columns `mmc predict` adds, and the progress lines of long computations."""

from __future__ import annotations

import os
import signal
import sys
import time

__all__ = [
    "EXIT_USAGE",
    "CLIError",
    "choice_option",
    "refuse_output_over_input",
    "check_out",
    "check_prob",
    "estimator_from_args",
    "prediction_columns",
    "refuse_overwrite",
    "FIT_PARAMS",
    "period_threshold",
    "error_line",
    "ERROR_CHARS",
    "progress_lines",
    "PROGRESS_EVERY",
]

EXIT_USAGE = 2


class CLIError(Exception):
    pass


ERROR_CHARS = 2000  # an error line quoting a hostile name (a column of 100k characters) stays readable


def error_line(text) -> str:
    """An error message as the one line the CLI prints: names quoted from the user's files (columns, groups,
    labels) may hold line breaks, which would split it, or bidirectional controls (U+202E), which would reorder
    what the terminal shows; :func:`mmc_core.common.jsonfile.one_line` escapes both and bounds the length."""
    from mmc_core.common import one_line

    return one_line(str(text), ERROR_CHARS)


def choice_option(p, flag: str, choices: list, help: str):
    """An option of fixed choices whose default is the first one (every such option of mmc and of its Dask
    engine options lists its default first)."""
    p.add_argument(flag, choices=choices, default=choices[0], help=help)


INPUT_OPTIONS = ("--data", "--model", "--groups", "--base-model")
OUTPUT_OPTIONS = ("--out", "--report")


def _option_value(args, option: str):
    return getattr(args, option[2:].replace("-", "_"), None)


def _input_paths(args, option: str) -> list:
    """The paths an input option reads: with --engine dask, --data is a folder or glob of Parquet files (the
    folder and each file it matches)."""
    value = _option_value(args, option)
    if not value:
        return []
    if isinstance(value, list):  # a repeated option (`mmc compare --model A --model B`)
        return list(value)
    if option == "--data" and getattr(args, "engine", None) == "dask":
        import glob

        return [value, *glob.glob(os.path.join(value, "*.parquet") if os.path.isdir(value) else value)]
    return [value]


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)  # also a hard link, or a name a case-insensitive file system folds
    except OSError:  # either is missing: only the resolved names can tell
        return False


def refuse_output_over_input(args) -> None:
    """CLIError when an output option of the command names one of its inputs (the same file after symlinks and
    relative paths, or a folder holding it). Every command calls this first, before any work."""
    for out_option in OUTPUT_OPTIONS:
        out = _option_value(args, out_option)
        if not out:
            continue
        real_out = os.path.realpath(out)
        for in_option in INPUT_OPTIONS:
            for path in _input_paths(args, in_option):
                real_in = os.path.realpath(path)
                if real_in == real_out or _same_file(out, path):
                    raise CLIError(
                        f"{out_option} {out} is the {in_option} input {path}: writing it would replace that input; "
                        f"choose another {out_option}"
                    )
                if real_in.startswith(real_out.rstrip(os.sep) + os.sep):
                    raise CLIError(
                        f"{out_option} {out} is a folder holding the {in_option} input {path}: writing it would "
                        f"replace that input; choose another {out_option}"
                    )


def check_out_name(path: str) -> None:
    """CLIError when --out is longer than this system allows (a name over 255 bytes, a path over 4,095): said
    before the work, not as "File name too long" once it is done."""
    import errno

    folder = os.path.dirname(os.path.abspath(path)) or os.sep
    try:
        name_max, path_max = os.pathconf(folder, "PC_NAME_MAX"), os.pathconf(folder, "PC_PATH_MAX")
    except (OSError, ValueError):  # the folder is missing (said next), or the system states no limit
        name_max, path_max = 255, 4096
    encoded = os.fsencode(os.path.abspath(path))
    longest = max((len(part) for part in encoded.split(b"/")), default=0)
    if longest > name_max or len(encoded) >= path_max:
        shown = path if len(path) <= 80 else path[:77] + "..."
        raise CLIError(
            f"--out {shown}: {os.strerror(errno.ENAMETOOLONG)} (a name is at most {name_max} bytes, a path "
            f"{path_max - 1} bytes, on this system)"
        )


def check_out(path: str):
    if path.endswith(("/", os.sep)):  # a folder's name: the file would be written beside it under another name
        raise CLIError(
            f"--out {path} names a folder; give a file name (only `mmc predict --engine dask` writes a folder)"
        )
    folder = os.path.dirname(os.path.abspath(path))
    check_out_name(path)
    if not os.path.isdir(folder):
        if os.path.exists(folder):
            raise CLIError(f"--out {path}: {folder} is a file, not a folder")
        raise CLIError(f"output folder does not exist: {folder}")
    if os.path.islink(path) and not os.path.exists(path):  # the file would replace the link itself
        raise CLIError(
            f"--out {path} is a symbolic link to nothing (its target is missing, or the links form a loop); "
            "give a file name"
        )
    if os.path.isdir(path):
        raise CLIError(f"--out {path} is a folder; give a file name")
    if os.path.exists(path) and not os.path.isfile(path):  # a device, FIFO or socket (--out /dev/full)
        raise CLIError(f"--out {path} exists and is not a regular file; give a file name")
    if not os.access(folder, os.W_OK | os.X_OK):  # before the work, not after it
        raise CLIError(f"cannot write to the output folder {folder} (permission denied)")


def check_prob(name: str, v: float):
    if not (0 < v < 1):
        raise CLIError(f"{name} must be strictly between 0 and 1, got {v}")


# the options of `mmc fit` that are MomentMulticalibrator parameters of the same name (their argparse dest)
FIT_PARAMS = [
    "alpha",
    "beta",
    "n_buckets",
    "n_moments",
    "step",
    "odd_moments",
    "label_range",
    "calibration_fraction",
    "early_stopping",
    "max_rounds",
    "random_state",
    "mean_buckets",
    "moment_buckets",
    "base_recalibration",
]


def estimator_from_args(args, **extra):
    """The estimator ``mmc fit`` builds from its options (one place for both engines)."""
    from mmc_core import MomentMulticalibrator
    from mmc_core.common import MMCError
    from mmc_core.fit import check_parameters

    cells = getattr(args, "shrunken_cells", "on") == "on"
    est = MomentMulticalibrator(**{k: getattr(args, k) for k in FIT_PARAMS}, shrunken_cells=cells, **extra)
    try:  # checked here, before the data is read, and said with the flags' names
        check_parameters(est)
    except MMCError as e:
        name, _, rest = str(e).partition(" ")
        raise CLIError(f"{FLAG_OF.get(name, name)} {rest}") from None
    return est


# the flags of the parameters whose names differ
FLAG_OF = {
    "alpha": "--alpha",
    "beta": "--beta",
    "n_buckets": "--buckets",
    "n_moments": "--moments",
    "step": "--step",
    "odd_moments": "--odd-moments",
    "calibration_fraction": "--calibration-fraction",
    "max_rounds": "--max-rounds",
    "mean_buckets": "--mean-buckets",
    "moment_buckets": "--moment-buckets",
    "early_stopping": "--early-stopping",
    "random_state": "--seed",
    "base_recalibration": "--base-recalibration",
    "shrunken_cells": "--shrunken-cells",
    "task": "--task",
    "variance_column": "--variance-pred",
    "label_range": "--label-range",
}


def prediction_columns(model, decision: bool = False, interval: bool = False) -> list[str]:
    """The columns `mmc predict` adds to the table: mean, moment_a, decision, lower / upper."""
    return (
        ["mean"]
        + [f"moment_{a}" for a in model.moments]
        + (["decision"] if decision else [])
        + (["lower", "upper"] if interval else [])
    )


def refuse_overwrite(existing, added) -> None:
    """CLIError when the table already has a column `mmc predict` would write: it would be overwritten in the
    output without a word (an input column lost)."""
    clash = [c for c in added if c in set(map(str, existing))]
    if clash:
        raise CLIError(
            f"the data already has column(s) {', '.join(repr(c) for c in clash)}, which mmc predict writes: rename "
            "or drop them first (the output would overwrite them)"
        )


def period_threshold(args, model):
    """A classifier's decision threshold of the period rates (--threshold, default 0.5); None for a regression."""
    if model.task != "binary":
        return None
    t = getattr(args, "threshold", None)
    return 0.5 if t is None else t


PROGRESS_EVERY = 5.0  # seconds: a long command says what it is doing at most this often, a quick one says nothing


def progress_lines(command: str):
    """A ``progress`` callback for the core's long computations: a line on stderr for the stage under way once
    PROGRESS_EVERY seconds have passed since the last line (or the start)."""
    last = [time.monotonic()]

    def say(what: str) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_EVERY:
            print(f"mmc: {command}: {what}...", file=sys.stderr, flush=True)
            last[0] = now

    return say


class StopOnCtrlC:
    """The commands' one Ctrl-C handler: the first Ctrl-C asks the fit to stop before its next update (``hit``, which
    the fit's stop callback reads), a second aborts at once (KeyboardInterrupt). Outside the main thread, where a
    signal handler cannot be set, it does nothing."""

    def __init__(self):
        self.hit = False
        self.previous = None

    def __enter__(self):
        def on_sigint(signum, frame):
            if self.hit:
                raise KeyboardInterrupt
            self.hit = True
            print("\nmmc: stopping before the next update (Ctrl-C again to abort)...", file=sys.stderr, flush=True)

        try:
            self.previous = signal.signal(signal.SIGINT, on_sigint)
        except ValueError:  # not in the main thread
            self.previous = None
        return self

    def __exit__(self, *exc):
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
        return False
