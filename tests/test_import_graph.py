"""The import graph of mmc_core and app (issue 36): no import cycle beyond the ones listed here, and no import of
another module's underscore name.

The cycle list only shrinks: a new cycle fails, and so does a listed cycle that is gone (take it off the list), so
the list is always the code's. Imports are read from the source (module level and inside functions); those under
``if TYPE_CHECKING:`` are not run and do not count.
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


def _graph(mods: dict | None = None):
    mods = _modules() if mods is None else mods
    edges, private = defaultdict(set), []
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _type_checking_nodes(tree)
        is_pkg = path.name == "__init__.py"
        aliases = {}  # a name bound to a module of the graph ("F", "mmc_core.common.memory") -> that module
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
                    if sub in mods:
                        aliases[alias.asname or alias.name] = sub
                    if dest in mods and dest != name:
                        edges[name].add(dest)
                        if alias.name.startswith("_") and not alias.name.startswith("__") and dest == target:
                            private.append((name, target, alias.name))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in mods:
                        aliases[alias.asname or alias.name] = alias.name
                    if alias.name in mods and alias.name != name:
                        edges[name].add(alias.name)
        # an imported module's _name read as an attribute (F._short, memory._glibc) is the same reach
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                target = aliases.get(ast.unparse(node.value))
                if target is not None and target != name:
                    private.append((name, target, node.attr))
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


def test_no_import_of_another_modules_private_name():
    # a module's own _names are its business; one another module needs is public (or moves to its one caller)
    _, _, private = _graph()
    assert not private, f"imports of another module's _name; import a public name instead: {sorted(private)[:20]}"


def test_the_graph_sees_what_it_should():
    # the reader must find real edges, or both tests above pass on an empty graph
    mods, edges, private = _graph()
    assert "mmc_core.estimator.multicalibrator" in mods and "app.ui.run_page" in mods
    assert "mmc_core.groups.group_set" in edges["mmc_core.estimator.multicalibrator"]
    assert "mmc_core.groups.group_set" not in edges["mmc_core.groups.sums"]  # under TYPE_CHECKING only
    assert _cycles(["a", "b", "c"], defaultdict(set, {"a": {"b"}, "b": {"c"}, "c": {"a"}})) == {
        frozenset({"a", "b", "c"})
    }


def test_the_reader_finds_private_imports(tmp_path):
    # the private-import test passes on no finding: the reader must see one, relative or absolute, at module
    # level or in a function, imported or read as a module's attribute, and must not count a module's own
    # names, dunders or TYPE_CHECKING imports
    files = {
        "pkg/__init__.py": "",
        "pkg/a.py": "def _x(): pass\n",
        "pkg/b.py": "from .a import _x\n",
        "pkg/c.py": "def f():\n    from pkg.a import _x\n",
        "pkg/d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import _x\nfrom pkg.a import __doc__\n",
        "pkg/e.py": "from pkg import a\nimport pkg.a as m\ndef f():\n    return a._x, m._x, a.__doc__, a.f\n",
        "pkg/f.py": "import pkg.a\ndef _y(): pass\nz = pkg.a._x\n",
    }
    mods = {}
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        parts = rel.removesuffix(".py").removesuffix("/__init__").split("/")
        mods[".".join(parts)] = path
    _, _, private = _graph(mods)
    assert sorted(private) == [
        ("pkg.b", "pkg.a", "_x"),
        ("pkg.c", "pkg.a", "_x"),
        ("pkg.e", "pkg.a", "_x"),
        ("pkg.e", "pkg.a", "_x"),
        ("pkg.f", "pkg.a", "_x"),
    ]
