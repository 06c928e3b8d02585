"""Issue 38: a FIFO, a device or a socket given as --model, --groups or --base-model is refused as a data file is
("... is not a regular file (a device, FIFO or socket); give a model file"): one line, exit 2, on both engines,
without waiting for a writer (a FIFO) or reading to the size limit (/dev/zero: 210 MB read, then "holds more than
210 MB"), and nothing written."""

from __future__ import annotations

import os
import socket

import numpy as np
import pandas as pd
import pytest

from app.cli.entry import main
from tests.fifo_feeder import FifoFeeder


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("special")
    rng = np.random.default_rng(5)
    df = pd.DataFrame(
        {"g": rng.choice(["a", "b"], 200), "y": rng.random(200), "p": rng.random(200), "q": rng.random(200)}
    )
    df.to_csv(d / "d.csv", index=False)
    (d / "pq").mkdir()
    df.to_parquet(d / "pq" / "part-0.parquet", index=False)
    fit = ["fit", "--data", str(d / "d.csv"), "--label", "y", "--pred", "p", "--group-cols", "g"]
    assert main([*fit, "--label-range", "0,1", "--out", str(d / "m.json")]) == 0
    os.mkfifo(d / "fifo.json")
    os.symlink(d / "fifo.json", d / "link-to-fifo.json")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(d / "sock.json"))
    yield d
    sock.close()


def _cases(d):
    csv, pq, model = str(d / "d.csv"), str(d / "pq"), str(d / "m.json")
    out = ["--out", str(d / "out" / "o.json")]
    cases = []
    for special in ("fifo.json", "link-to-fifo.json", "sock.json", "/dev/zero", "/dev/null"):
        s = special if special.startswith("/") else str(d / special)
        for eng, data in (("numpy", csv), ("dask", pq)):
            e = ["--engine", eng, "--workers", "1", "--memory-limit", "1GB"]
            cases.append(["predict", "--model", s, "--data", data, "--pred", "p", *e, *out[:1], str(d / "o.csv")])
            cases.append(["audit", "--model", s, "--data", data, "--label", "y", "--pred", "p", *e, *out])
            cases.append(["fit", "--groups", s, "--data", data, "--label", "y", "--pred", "p", *e, *out])
        cases.append(["report", "--model", s, "--data", csv, "--label", "y", "--pred", "p", "--out", str(d / "r.pdf")])
        cases.append(["predict", "--model", model, "--base-model", s, "--data", csv, "--out", str(d / "o.csv")])
        cases.append(["compare", "--data", csv, "--label", "y", "--pred-a", "p", "--pred-b", "q", "--groups", s, *out])
    return cases


def test_special_files_are_refused_in_one_line(work, capsys):
    d = work
    (d / "out").mkdir(exist_ok=True)
    failures = []
    with FifoFeeder([str(d / "fifo.json")]) as unblock:
        for argv in _cases(d):
            capsys.readouterr()
            code = main(argv)
            lines = capsys.readouterr().err.strip().splitlines()
            ok = code == 2 and len(lines) == 1 and "is not a regular file (a device, FIFO or socket)" in lines[0]
            if not ok:
                failures.append(f"{' '.join(argv[:3])}: exit {code}: {lines}")
    assert not failures, "\n".join(failures)
    assert unblock.opened == 0  # never opened: refused from its stat
    assert os.listdir(d / "out") == [] and not (d / "o.csv").exists() and not (d / "r.pdf").exists()
