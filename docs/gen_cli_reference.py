"""Write docs/reference/cli.md: the ``--help`` of ``mmc`` and of each of its commands.

Run ``python docs/gen_cli_reference.py`` after changing a command's options; ``--check`` exits 1 when the page
is stale (tests/test_docs_cli_reference.py runs the same comparison).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "reference" / "cli.md"
WIDTH = "100"  # argparse wraps help to $COLUMNS: fixed so the page is the same on every terminal


def render() -> str:
    """The page's text, from the parser ``mmc`` uses."""
    os.environ["COLUMNS"] = WIDTH
    sys.path.insert(0, str(ROOT))
    from app.cli.entry import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    out = [
        "# CLI reference",
        "",
        "Generated from the parser by `python docs/gen_cli_reference.py` (a test fails when this page is stale).",
        "Worked examples: [Getting started](../getting-started.md#command-line-quickstart).",
        "",
        "## mmc",
        "",
        "```text",
        parser.format_help().rstrip(),
        "```",
    ]
    for name, sub in commands.items():
        out += ["", f"## mmc {name}", "", "```text", sub.format_help().rstrip(), "```"]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the page, or with ``--check`` compare it with the parser (exit 1 if it differs)."""
    check = "--check" in (sys.argv[1:] if argv is None else argv)
    text = render()
    if check:
        if not PAGE.exists() or PAGE.read_text(encoding="utf-8") != text:
            print(f"{PAGE.relative_to(ROOT)} is stale: run python docs/gen_cli_reference.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
