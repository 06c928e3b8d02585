"""Ctrl-C during `mmc fit`: no file unless asked, and then one marked as not converged."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from mmc_core.common.synthetic import demo_distribution


@pytest.fixture(scope="module")
def big_csv(tmp_path_factory):
    d = tmp_path_factory.mktemp("interrupt")
    t = pd.DataFrame(demo_distribution().sample_table(100_000, np.random.default_rng(0), truth=False))
    t.to_csv(d / "big.csv", index=False)
    return d / "big.csv"


def _fit_and_interrupt(csv, out, *extra):
    # the paper's step with tiny thresholds runs for minutes: long enough to interrupt
    cmd = [
        sys.executable,
        "-m",
        "app.cli",
        "fit",
        "--data",
        str(csv),
        "--label",
        "outcome",
        "--group-cols",
        "sex,race,age,score",
        "--max-order",
        "2",
        "--moments",
        "4",
        "--step",
        "paper",
        "--alpha",
        "2e-5",
        "--beta",
        "2e-6",
        "--out",
        str(out),
        *extra,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # interrupt once the descent runs (its Ctrl-C handler is then in place; `mmc fit` says so on stderr when
    # it polls for a stop the first time): a fixed sleep raced with reading the table on a loaded machine
    first = proc.stderr.readline()
    assert first.startswith("mmc: fitting"), (first, proc.poll())
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    try:
        out_, err = proc.communicate(timeout=120)
    finally:  # a fit that does not stop must not outlive its test
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, first + err


@pytest.mark.slow
def test_ctrl_c_writes_nothing_by_default(big_csv, tmp_path):
    out = tmp_path / "m.json"
    code, err = _fit_and_interrupt(big_csv, out)
    assert code == 130 and "interrupted after" in err and "nothing was written" in err, err
    assert "Traceback" not in err and not out.exists() and not [p for p in os.listdir(tmp_path) if p.startswith(".tmp")]


@pytest.mark.slow
def test_ctrl_c_with_save_partial_keeps_a_not_converged_model(big_csv, tmp_path):
    out = tmp_path / "m.json"
    code, err = _fit_and_interrupt(big_csv, out, "--save-partial")
    assert code == 0, err
    model = json.loads(out.read_text())
    assert model["info"]["converged"] is False and model["info"]["stopped_by_user"] is True


# ---- the Dask engine: Ctrl-C stops the descent, closes the LocalCluster it started, writes nothing --------------
@pytest.fixture(scope="module")
def big_parquet(tmp_path_factory):
    pytest.importorskip("distributed")
    d = tmp_path_factory.mktemp("interrupt_dask")
    t = pd.DataFrame(demo_distribution().sample_table(60_000, np.random.default_rng(1), truth=False))
    for i, part in enumerate(np.array_split(np.arange(len(t)), 3)):
        t.iloc[part].to_parquet(d / f"part-{i}.parquet")
    return d


def _dask_fit(data, out, *extra):
    cmd = [sys.executable, "-m", "app.cli", "fit", "--engine", "dask", "--workers", "1", "--memory-limit", "2GB"]
    cmd += ["--data", str(data / "*.parquet"), "--label", "outcome", "--group-cols", "sex,race,age,score"]
    cmd += ["--max-order", "2", "--moments", "2", "--step", "paper", "--alpha", "2e-5", "--beta", "2e-6"]
    return subprocess.Popen(
        [*cmd, "--out", str(out), *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _wait_for_descent(proc) -> str:
    """stderr up to the line that says the descent runs (the cluster is up and the Ctrl-C handler in place)."""
    seen = ""
    while True:
        line = proc.stderr.readline()
        assert line, (seen, proc.poll(), proc.communicate())
        seen += line
        if line.startswith("mmc: fitting"):
            return seen


@pytest.mark.slow
def test_dask_ctrl_c_stops_closes_the_cluster_and_writes_nothing(big_parquet, tmp_path):
    psutil = pytest.importorskip("psutil")
    out = tmp_path / "m.json"
    proc = _dask_fit(big_parquet, out)
    err = _wait_for_descent(proc)
    assert "starting a local Dask cluster" in err
    children = psutil.Process(proc.pid).children(recursive=True)  # the cluster's scheduler/worker processes
    assert children, "the LocalCluster's worker process should be running"
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=180)
    err += rest
    assert proc.returncode == 130, err
    assert "stopping before the next update" in err and "interrupted after" in err and "nothing was written" in err
    assert "Traceback" not in err and not out.exists()
    gone, alive = psutil.wait_procs(children, timeout=30)
    assert not alive, f"processes of the local cluster still running after exit: {alive}"


@pytest.mark.slow
def test_dask_ctrl_c_twice_aborts_and_still_closes_the_cluster(big_parquet, tmp_path):
    psutil = pytest.importorskip("psutil")
    out = tmp_path / "m.json"
    proc = _dask_fit(big_parquet, out)
    _wait_for_descent(proc)
    children = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGINT)
    line = proc.stderr.readline()  # the first Ctrl-C is acknowledged before the second one is sent
    assert "stopping before the next update" in line or line.strip() == "", line
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=180)
    assert proc.returncode != 0 and not out.exists(), err
    gone, alive = psutil.wait_procs(children, timeout=30)
    assert not alive, f"processes of the local cluster still running after exit: {alive}"


def test_sigterm_to_mmc_dashboard_stops_streamlit_too(tmp_path):
    """Found in an exploratory session: SIGTERM to `mmc dashboard` (what a service manager or `kill` sends)
    ended the command but left its Streamlit child serving the port. It is passed on now: the child ends."""
    import time
    import urllib.request

    from tests.dashboard_server import dashboard_server, free_port

    port = free_port()
    with dashboard_server(port, tmp_path / "server.log", start_timeout=120) as proc:
        proc.send_signal(signal.SIGTERM)  # the parent only, not its process group
        proc.wait(timeout=60)
        deadline = time.time() + 60  # a generous wait for a loaded machine; nothing here asserts a duration
        while time.time() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2)
            except OSError:
                break  # nothing serves the port any more
            time.sleep(0.3)
        else:
            raise AssertionError("Streamlit still serves the port after SIGTERM to mmc dashboard")


def test_a_line_printed_by_the_ctrl_c_handler_mid_write_does_not_hang():
    """The Ctrl-C handler prints from the main thread, possibly while that thread is inside a write of the CLI's
    stderr wrapper (holding its lock): the handler's line must go out, not wait forever for the lock (seen as
    `mmc fit` hanging after Ctrl-C on a loaded machine)."""
    import io
    import threading

    from app.cli.entry import _HeldNotes

    nested: list = []

    class Stream(io.StringIO):
        def write(self, s):
            if not nested:  # the signal arrives while the first line is being written
                nested.append(True)
                notes.write("mmc: stopping after the current round\n")
            return super().write(s)

    stream = Stream()
    notes = _HeldNotes(stream)
    t = threading.Thread(target=notes.write, args=("mmc: fitting round 1\n",), daemon=True)
    t.start()
    t.join(20)
    assert not t.is_alive(), "a write from inside a write deadlocked"
    assert "mmc: stopping after the current round" in stream.getvalue()
    assert "mmc: fitting round 1" in stream.getvalue()
