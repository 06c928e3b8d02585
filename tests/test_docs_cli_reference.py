"""docs/reference/cli.md is the ``--help`` of every ``mmc`` command as the parser prints it now."""

from __future__ import annotations

import pathlib
import runpy

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_cli_reference_is_current(monkeypatch):
    gen = runpy.run_path(str(ROOT / "docs" / "gen_cli_reference.py"))
    monkeypatch.setenv("COLUMNS", "100")  # render() sets it; restored after the test
    text = gen["render"]()
    page = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    assert page == text, "docs/reference/cli.md is stale: run python docs/gen_cli_reference.py"
    from app.cli.entry import build_parser

    commands = [a for a in build_parser()._actions if a.dest == "command"][0].choices
    assert len(commands) >= 7
    for name in commands:
        assert f"\n## mmc {name}\n" in page
        assert f"usage: mmc {name} " in page
