"""The package never evaluates, executes or unpickles user-controlled text or files.

Scans the source of mmc_core/ and app/ with the ast module for calls that would turn data into code:
eval, exec, compile, pickle/dill/joblib/marshal loads, pandas eval/query, yaml.load, os.system,
subprocess with shell=True, and __import__ of a computed name.
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__", "execfile"}
FORBIDDEN_ATTRS = {
    ("pickle", "load"),
    ("pickle", "loads"),
    ("dill", "load"),
    ("dill", "loads"),
    ("joblib", "load"),
    ("marshal", "load"),
    ("marshal", "loads"),
    ("pd", "eval"),
    ("pandas", "eval"),
    ("yaml", "load"),
    ("os", "system"),
    ("os", "popen"),
    ("shelve", "open"),
}
FORBIDDEN_METHODS = {"query", "eval"}  # DataFrame.query / DataFrame.eval on any object


def _violations(path: pathlib.Path):
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and f.id in FORBIDDEN_CALLS:
            yield f"{path.relative_to(ROOT)}:{node.lineno} calls {f.id}()"
        if isinstance(f, ast.Attribute):
            base = f.value.id if isinstance(f.value, ast.Name) else None
            if (base, f.attr) in FORBIDDEN_ATTRS:
                yield f"{path.relative_to(ROOT)}:{node.lineno} calls {base}.{f.attr}()"
            elif f.attr in FORBIDDEN_METHODS:
                yield f"{path.relative_to(ROOT)}:{node.lineno} calls .{f.attr}()"
        for kw in node.keywords:
            if kw.arg == "shell" and isinstance(kw.value, ast.Constant) and kw.value.value is True:
                yield f"{path.relative_to(ROOT)}:{node.lineno} runs a shell"


def test_no_code_execution_on_user_data():
    files = sorted(p for d in ("mmc_core", "app") for p in (ROOT / d).rglob("*.py"))
    assert len(files) >= 10
    found = [v for p in files for v in _violations(p)]
    assert not found, "\n".join(found)


def test_the_scanner_catches_what_it_looks_for(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import pickle, pandas as pd\n"
        "eval('1')\npickle.loads(b'')\ndf.query('a > 1')\npd.eval('1+1')\n"
        "import subprocess\nsubprocess.run('ls', shell=True)\n"
    )
    global ROOT
    old, ROOT = ROOT, tmp_path
    try:
        assert len(list(_violations(bad))) == 5
    finally:
        ROOT = old
