"""The import graph of mmc_core and app (issue 36): no import cycle beyond the ones listed here, at module level
and at package level, no import of another module's underscore name, and the app imports mmc_core only through
``mmc_core`` or one of its packages (``mmc_core.fit``), never a module behind a package.

The cycle list only shrinks: a new cycle fails, and so does a listed cycle that is gone (take it off the list), so
the list is always the code's. Imports are read from the source (module level and inside functions); those under
``if TYPE_CHECKING:`` are not run and do not count. A package's ``__init__`` is a module of the graph, and an import
of ``mmc_core.fit.model`` from outside ``mmc_core.fit`` also imports ``mmc_core.fit`` (Python runs the package's
``__init__`` first), so it counts as an edge to the package too. At package level, every module stands for its
package (``mmc_core.fit.model`` for ``mmc_core.fit``): the packages must import one another without a cycle.
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
# the same between packages (every module standing for its package, see _package_of): none
KNOWN_PACKAGE_CYCLES: set[frozenset] = set()


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


def _implicit(name: str, dest: str, mods: dict) -> set:
    """The packages an import of ``dest`` runs the ``__init__`` of and ``name`` is not inside (its own packages are
    imported already)."""
    parts = dest.split(".")
    out = set()
    for i in range(1, len(parts)):
        pkg = ".".join(parts[:i])
        if pkg in mods and name != pkg and not name.startswith(pkg + "."):
            out.add(pkg)
    return out


def _package_of(name: str, mods: dict) -> str:
    """The package a module stands for at package level: ``mmc_core.fit`` for ``mmc_core.fit.model``; a top-level
    module (``app.dashboard``) and a root package (``mmc_core``) stand for themselves."""
    parts = name.split(".")
    pkg = ".".join(parts[:2])
    return pkg if len(parts) > 2 and pkg in mods and mods[pkg].name == "__init__.py" else name


def _package_edges(mods: dict, edges) -> defaultdict:
    out = defaultdict(set)
    for name, dests in list(edges.items()):
        for dest in dests:
            a, b = _package_of(name, mods), _package_of(dest, mods)
            if a != b:
                out[a].add(b)
    return out


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
                        edges[name].update(_implicit(name, dest, mods))
                        if alias.name.startswith("_") and not alias.name.startswith("__") and dest == target:
                            private.append((name, target, alias.name))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in mods:
                        aliases[alias.asname or alias.name] = alias.name
                    if alias.name in mods and alias.name != name:
                        edges[name].add(alias.name)
                        edges[name].update(_implicit(name, alias.name, mods))
        # a package's lazy exports (the _EXPORTS table its __getattr__ imports from, on first use) are imports
        # of its modules, as imports inside a function are
        if is_pkg:
            for node in tree.body:
                if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "_EXPORTS":
                    for value in ast.literal_eval(node.value).values():
                        if f"{name}.{value}" in mods:
                            edges[name].add(f"{name}.{value}")
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


def test_no_import_cycle_between_packages():
    # mmc_core's packages stack: common, groups, paper, fit, intervals, auditing, comparison, engines, estimator,
    # discovery (each imports only packages before it); app's: figures, services, report, cli and ui
    mods, edges, _ = _graph()
    found = _cycles(sorted({_package_of(m, mods) for m in mods}), _package_edges(mods, edges))
    new = [sorted(c) for c in found - KNOWN_PACKAGE_CYCLES]
    gone = [sorted(c) for c in KNOWN_PACKAGE_CYCLES - found]
    assert not new, f"new import cycles between packages: {new}"
    assert not gone, f"cycles between packages broken: take them off KNOWN_PACKAGE_CYCLES: {gone}"


def test_the_app_imports_mmc_core_through_its_packages():
    # the app takes mmc_core's names from `mmc_core` or a package's __init__ (its __all__), never from a module
    # behind it: the modules of a package are private, so they can be split or merged without touching the app
    mods, edges, _ = _graph()
    reach = sorted(
        (name, dest)
        for name in mods
        if name.startswith("app.")
        for dest in edges[name]
        if dest.startswith("mmc_core.") and mods[dest].name != "__init__.py"
    )
    assert not reach, f"app modules importing a module behind an mmc_core package; import the package: {reach[:20]}"


def test_no_import_of_another_modules_private_name():
    # a module's own _names are its business; one another module needs is public (or moves to its one caller)
    _, _, private = _graph()
    assert not private, f"imports of another module's _name; import a public name instead: {sorted(private)[:20]}"


def test_the_graph_sees_what_it_should():
    # the reader must find real edges, or both tests above pass on an empty graph
    mods, edges, private = _graph()
    assert "mmc_core.estimator.multicalibrator" in mods and "app.ui.run_page" in mods
    assert "mmc_core.groups.group_set" in edges["mmc_core.estimator.multicalibrator"]
    assert "mmc_core.groups" in edges["mmc_core.estimator.multicalibrator"]  # the package's __init__ runs first
    assert "mmc_core.estimator" not in edges["mmc_core.estimator.multicalibrator"]  # its own package: imported
    assert "mmc_core.groups.group_set" not in edges["mmc_core.groups.sums"]  # under TYPE_CHECKING only
    assert "mmc_core.fit" in _package_edges(mods, edges)["mmc_core.estimator"]
    assert "mmc_core.auditing" in edges["app.services.pipeline"]
    assert "mmc_core.auditing.metrics" in edges["mmc_core.auditing"]  # a lazy export
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


def test_the_reader_finds_package_cycles_and_reach(tmp_path):
    # p.a imports q.b, which imports p.c: no cycle of modules, but importing q.b runs p's __init__, which imports
    # p.a: a cycle through the packages' __init__s, and one between the packages p and q; app.x imports a module
    # behind the package p, app.y the package
    files = {
        "pkg/__init__.py": "",
        "pkg/p/__init__.py": "from .a import f\n",
        "pkg/p/a.py": "from pkg.q.b import g\ndef f(): pass\n",
        "pkg/p/c.py": "X = 1\n",
        "pkg/q/__init__.py": "",
        "pkg/q/b.py": "from ..p.c import X\ndef g(): pass\n",
        "app/x.py": "from pkg.p.a import f\n",
        "app/y.py": "from pkg.p import f\n",
    }
    mods = {}
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        parts = rel.removesuffix(".py").removesuffix("/__init__").split("/")
        mods[".".join(parts)] = path
    _, edges, _ = _graph(mods)
    assert edges["pkg.q.b"] == {"pkg.p.c", "pkg.p"}
    assert _cycles(list(mods), edges) == {frozenset({"pkg.p", "pkg.p.a", "pkg.q.b"})}
    assert _cycles(sorted(mods), _package_edges(mods, edges)) == {frozenset({"pkg.p", "pkg.q"})}
    assert edges["app.x"] == {"pkg.p.a", "pkg", "pkg.p"} and edges["app.y"] == {"pkg.p", "pkg"}
