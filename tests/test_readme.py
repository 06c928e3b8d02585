"""The README's Python and command-line quickstarts run exactly as written."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _block(heading: str, lang: str) -> str:
    section = README.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    m = re.search(rf"```{lang}\n(.*?)```", section, re.S)
    assert m, f"no {lang} block under '{heading}'"
    return m.group(1)


def _env():
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def test_first_screen_has_exactly_the_two_fresh_machine_commands():
    first = README.split("## ", 1)[0]
    cmds = re.findall(r"^bash scripts/\S+", first, re.M)
    assert cmds == ["bash scripts/dashboard.sh", "bash scripts/test.sh"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash scripts/test.sh" in ci


def test_python_quickstart_runs(tmp_path):
    code = _block("Python quickstart", "python")
    assert len(code.strip().splitlines()) <= 12
    r = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().startswith("True")


@pytest.mark.slow
def test_cli_quickstart_runs(tmp_path):
    script = _block("Command-line quickstart", "bash")
    os.symlink(ROOT / "demo_datasets", tmp_path / "demo_datasets")
    r = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    for f in ("model.json", "predictions.csv", "audit.json", "report.pdf"):
        assert (tmp_path / f).stat().st_size > 0, f
    assert (tmp_path / "report.pdf").read_bytes()[:5] == b"%PDF-"
