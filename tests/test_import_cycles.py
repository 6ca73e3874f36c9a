"""No import cycles between kohort's modules, imports inside functions counted.

The import graph is read from the AST of every module under src/kohort (every `import` and
`from ... import` anywhere in a module, relative ones resolved), so a lazy import that only hides
a cycle from the interpreter still counts. `import a.b` is an edge to `a.b`; `from a.b import x` is
an edge to `a.b` (a package's `__init__` runs, lazy exports included) and to `a.b.x` when that is a
module. The parents of the named module are not counted (a package whose `__init__` re-exports its
submodules is the usual shape, not a cycle). A cycle is a strongly connected component of more than
one module.
"""
from __future__ import annotations

import ast
from pathlib import Path

import kohort

ROOT = Path(kohort.__file__).parent

def _modules() -> dict[str, Path]:
    mods = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = path
    return mods


def _executed_nodes(tree: ast.AST):
    """Every node of the module, function bodies included (a lazy import still runs), except the bodies
    of `if TYPE_CHECKING:` blocks, which never run."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, ast.If) and (
                (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
                or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))


def _imports(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """The kohort modules `name` imports, anywhere in its source."""
    is_pkg = path.name == "__init__.py"
    package = name if is_pkg else name.rpartition(".")[0]
    out = set()
    for node in _executed_nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                if node.level > 1:
                    base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [mod] + [f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in mods]
        else:
            continue
        for t in targets:
            while t and t not in mods:      # `import kohort.a.b.C`-style names: the longest module prefix
                t = t.rpartition(".")[0]
            if t.startswith("kohort") and t != name:
                out.add(t)
    return out


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    return {name: _imports(name, path, mods) for name, path in mods.items()}


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = set()
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.add(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(frozenset(comp))
    return found


def test_the_cycle_finder_finds_lazy_and_relative_cycles():
    g = {"kohort.a": {"kohort.b"}, "kohort.b": {"kohort.c"}, "kohort.c": {"kohort.a"},
         "kohort.d": {"kohort.a"}, "kohort.e": set()}
    assert cycles(g) == [frozenset({"kohort.a", "kohort.b", "kohort.c"})]
    assert cycles({"kohort.a": {"kohort.b"}, "kohort.b": set()}) == []
    mods = _modules()
    # a lazy import inside a function counts, and a relative one is resolved
    src = ROOT / "client" / "consumer" / "group.py"
    assert "kohort.client.consumer.membership" in _imports("kohort.client.consumer.group", src, mods)
    assert len(mods) > 100


def test_no_import_cycles():
    found = [sorted(c) for c in cycles(import_graph()) ]
    assert found == [], "import cycles (imports inside functions count):\n" + "\n".join(
        " <-> ".join(c) for c in found)
