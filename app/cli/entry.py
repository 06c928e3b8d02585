"""The ``mmc`` command line: fit, predict, audit, report, compare, discover, dashboard.

:func:`main` (the ``mmc`` entry point) parses the options (:mod:`app.cli.parser`) and runs the command: ``fit``
in :mod:`app.cli.fit`, ``predict`` in :mod:`app.cli.apply`, ``audit`` and ``report`` in :mod:`app.cli.audit`,
``compare`` in :mod:`app.cli.compare`, ``discover`` in :mod:`app.cli.discover`, ``dashboard`` here; their Dask
engine in :mod:`app.cli.dask`, and what they share in :mod:`app.cli.common`.

Every user error prints one line to stderr (``mmc: error: ...``) and exits with status 2; nothing is
written unless the command succeeds (outputs are written to a temporary file and renamed), and an output that
is one of the command's inputs is refused before any work (:func:`app.cli.common.refuse_output_over_input`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

__all__ = ["main", "build_parser"]

from .apply import cmd_predict
from .audit import cmd_audit, cmd_report
from .common import EXIT_USAGE, CLIError, error_line
from .discover import cmd_discover
from .fit import cmd_fit
from .parser import build_parser


class _HeldNotes:
    """stderr while a command runs, holding its "note:" and "warning:" lines back until the command has done its
    work: a note said while the inputs are read ("only the whole table is compared", "--pred is ignored") came
    before the error a later input caused, and a bad input was two lines. Held lines are written when any other
    line is (a progress line: the inputs passed their checks) and when the command succeeds; an error drops them,
    so that it is the one line."""

    HELD = ("note: ", "warning: ")

    def __init__(self, stream):
        self.stream, self.held, self.part = stream, [], ""
        self.lock = threading.RLock()  # the heartbeat (:func:`_run`) writes from its own thread, and a
        # Ctrl-C handler prints from the main thread, maybe in the middle of a write: a plain Lock deadlocked it
        self.last = time.monotonic()  # when a line was last shown

    def write(self, text) -> int:
        with self.lock:
            self.part += text
            *lines, self.part = self.part.split("\n")
            for line in lines:
                if line.startswith(self.HELD):
                    self.held.append(line + "\n")
                else:
                    self.release()
                    self.stream.write(line + "\n")
                    self.last = time.monotonic()
        return len(text)

    def beat(self, command: str, started: float) -> None:
        """A line saying the command still works, when nothing was shown for HEARTBEAT seconds (a long prediction
        or comparison ran half a minute without a word)."""
        with self.lock:
            now = time.monotonic()
            if now - self.last >= HEARTBEAT and not self.part:
                self.release()
                self.stream.write(f"mmc: {command}: still working, {now - started:.0f} s so far\n")
                self.stream.flush()
                self.last = now

    def release(self) -> None:
        for line in self.held:
            self.stream.write(line)
        self.held = []

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name):  # fileno, isatty, encoding: the real stream's
        return getattr(self.stream, name)


HEARTBEAT = 15.0  # seconds without a line on stderr after which a running command says it still works


def _run(command, args) -> int:
    """``command(args)`` with its notes held back (:class:`_HeldNotes`): written if it succeeds, dropped if not;
    and a heartbeat line whenever it has said nothing for HEARTBEAT seconds."""
    real = sys.stderr
    held = _HeldNotes(real)
    sys.stderr = held
    ok = False
    done = threading.Event()
    started = time.monotonic()

    def heartbeat():
        while not done.wait(min(1.0, HEARTBEAT / 4)):
            held.beat(args.command, started)

    beater = threading.Thread(target=heartbeat, daemon=True)
    beater.start()
    try:
        code = command(args)
        ok = code == 0
        return code
    finally:
        done.set()
        beater.join()
        sys.stderr = real
        if ok:
            held.release()
        if held.part and (ok or not held.part.startswith(_HeldNotes.HELD)):
            real.write(held.part)
        real.flush()


def cmd_compare(args) -> int:
    from .compare import cmd_compare as run

    return run(args)


def cmd_dashboard(args) -> int:
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "dashboard.py")
    if args.data and not os.path.exists(args.data):
        raise CLIError(f"data file not found: {args.data}")
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(
            f"WARNING: serving the dashboard on {args.host}: anyone who can reach this machine can open it "
            "and upload data. Use the default 127.0.0.1 unless you mean it.",
            file=sys.stderr,
        )
    cmd = [
        sys.executable,
        "-m",
        "app.serve",  # streamlit run, with the Host header check (DNS rebinding; app/serve.py)
        "run",
        script,
        "--server.port",
        str(args.port),
        "--server.address",
        args.host,
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        "--server.fileWatcherType",
        "none",
        # also when a config.toml of the working folder or of the user turns it back on: Streamlit's table
        # download writes formulas and bare line breaks as they are (our CSV writer is app.services.io.csv_bytes)
        "--client.disableDataExport",
        "true",
    ]
    if args.data:
        cmd += ["--", "--data", os.path.abspath(args.data)]
    print(f"mmc dashboard: http://{args.host}:{args.port}", file=sys.stderr, flush=True)
    proc = subprocess.Popen(cmd)  # noqa: S603 - our own streamlit command line, no shell
    # a service manager (or `kill`) stops `mmc dashboard` with SIGTERM: pass it on, or Streamlit keeps the port
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: proc.send_signal(signum))
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        return proc.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)


COMMANDS = {
    "fit": cmd_fit,
    "predict": cmd_predict,
    "audit": cmd_audit,
    "report": cmd_report,
    "compare": cmd_compare,
    "discover": cmd_discover,
    "dashboard": cmd_dashboard,
}


PAIR_OPTIONS = ("--label-range",)  # options whose value LO,HI may start with a minus sign


def _join_pairs(argv: list) -> list:
    """``--label-range -20,140`` as ``--label-range=-20,140``: argparse reads a value starting with "-" that is
    not a plain number as another option ("expected one argument")."""
    out, i = [], 0
    while i < len(argv):
        a = argv[i]
        if a in PAIR_OPTIONS and i + 1 < len(argv) and argv[i + 1].startswith("-") and "," in argv[i + 1]:
            out.append(f"{a}={argv[i + 1]}")
            i += 2
            continue
        out.append(a)
        i += 1
    return out


def main(argv=None) -> int:
    from mmc_core.common import MMCError

    try:
        args = build_parser().parse_args(_join_pairs(sys.argv[1:] if argv is None else list(argv)))
    except SystemExit as e:  # usage errors and --help: argparse has printed its message
        return int(e.code or 0)
    try:
        if args.command == "dashboard":  # a server: what it says is said at once
            return COMMANDS[args.command](args)
        return _run(COMMANDS[args.command], args)
    except (MMCError, CLIError) as e:
        print(f"mmc: error: {error_line(e)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("mmc: interrupted; nothing was written", file=sys.stderr)
        return 130
    except MemoryError:
        print(
            "mmc: error: out of memory: the table or the number of groups is too large for this machine",
            file=sys.stderr,
        )
        return EXIT_USAGE
    except OSError as e:  # a full disk, a read-only folder, a file that vanished (also raised by Dask workers)
        where = f" {e.filename}" if getattr(e, "filename", None) else ""
        print(f"mmc: error: {error_line(f'cannot read or write{where}: {e.strerror or e}')}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as e:  # a bug: one line for the user, the traceback on request
        if os.environ.get("MMC_TRACEBACK"):
            raise
        print(
            f"mmc: internal error: {type(e).__name__}: {error_line(str(e).splitlines()[0][:300]) if str(e) else ''} "
            "(a bug: please report it; set MMC_TRACEBACK=1 for the traceback)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
