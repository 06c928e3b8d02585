"""The import graph of mmc_core and app (issue 36): no import cycle beyond the ones listed here, and no more
imports of another module's underscore names than counted here.

Both lists only shrink: a new cycle or a new private import fails, and so does a listed cycle that is gone (take
it off the list) or a count that fell (lower it), so the numbers here are always the code's. Imports are read
from the source (module level and inside functions); those under ``if TYPE_CHECKING:`` are not run and do not
count.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("mmc_core", "app")

# the cycles left to break (issue 36), each the set of modules that import one another: none now, and a new one
# fails the test
KNOWN_CYCLES: set[frozenset] = set()
# imports of another module's _name (a module's own privates are its business)
KNOWN_PRIVATE_IMPORTS = 12


def _modules() -> dict:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _type_checking_nodes(tree) -> set:
    """The import nodes under ``if TYPE_CHECKING:``."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                skip.update(id(n) for n in ast.walk(child))
    return skip


def _graph():
    mods = _modules()
    edges, private = defaultdict(set), []
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _type_checking_nodes(tree)
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_pkg else name.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    dest = sub if sub in mods else target
                    if dest in mods and dest != name:
                        edges[name].add(dest)
                        if alias.name.startswith("_") and not alias.name.startswith("__") and dest == target:
                            private.append((name, target, alias.name))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in mods and alias.name != name:
                        edges[name].add(alias.name)
    return mods, edges, private


def _cycles(nodes, edges) -> set:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index, low, on, stack, out = {}, {}, set(), [], set()
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.add(frozenset(comp))
    return out


def test_no_import_cycle_beyond_the_listed_ones():
    mods, edges, _ = _graph()
    found = _cycles(list(mods), edges)
    new = [sorted(c) for c in found - KNOWN_CYCLES]
    gone = [sorted(c) for c in KNOWN_CYCLES - found]
    assert not new, f"new import cycles: {new}"
    assert not gone, f"cycles broken: take them off KNOWN_CYCLES: {gone}"


def test_private_imports_only_shrink():
    _, _, private = _graph()
    assert len(private) <= KNOWN_PRIVATE_IMPORTS, (
        f"{len(private) - KNOWN_PRIVATE_IMPORTS} new import(s) of another module's _name; import a public name "
        f"instead: {sorted(private)[:20]}"
    )
    assert len(private) == KNOWN_PRIVATE_IMPORTS, f"private imports down to {len(private)}: lower the count"


def test_the_graph_sees_what_it_should():
    # the reader must find real edges, or both tests above pass on an empty graph
    mods, edges, private = _graph()
    assert "mmc_core.estimator" in mods and "app.ui.run_page" in mods
    assert "mmc_core.groups" in edges["mmc_core.estimator"]
    assert "mmc_core.groups" not in edges["mmc_core.sums"]  # under TYPE_CHECKING only
    assert _cycles(["a", "b", "c"], defaultdict(set, {"a": {"b"}, "b": {"c"}, "c": {"a"}})) == {
        frozenset({"a", "b", "c"})
    }
