"""Layering: the pure state machines — the client's group member (client/consumer/membership.py)
and the broker's group coordinator (broker/coordinator/), and the share-group machines
(broker/share/, client/share/) — import no socket, thread, clock or asyncio, directly or through
any kohort module they import (their time comes in as `now_ms`)."""
import ast
import pathlib

import pytest

SRC = pathlib.Path(__file__).resolve().parents[1] / "src"
BANNED = {"asyncio", "socket", "threading", "time", "datetime", "selectors", "concurrent", "_thread"}


def _module_path(name: str) -> pathlib.Path | None:
    base = SRC.joinpath(*name.split("."))
    if base.with_suffix(".py").exists():
        return base.with_suffix(".py")
    if (base / "__init__.py").exists():
        return base / "__init__.py"
    return None


def _load_time_nodes(tree):
    """Nodes that run when the module is imported (function bodies run later, if ever)."""
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        yield node
        todo.extend(ast.iter_child_nodes(node))


def _imports(path: pathlib.Path, module: str, lazy_too: bool = False) -> list[str]:
    tree = ast.parse(path.read_text())
    pkg = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out = []
    for node in (ast.walk(tree) if lazy_too else _load_time_nodes(tree)):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = pkg.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1])
                mod = f"{base}.{node.module}" if node.module else base
                out.append(mod)
                out += [f"{mod}.{a.name}" for a in node.names]     # `from . import x` may name a module
            else:
                out.append(node.module or "")
                out += [f"{node.module}.{a.name}" for a in node.names]
    return out


def closure(root: str) -> dict[str, list[str]]:
    """{kohort module: [banned stdlib modules it imports]} over everything `root` imports."""
    parts = root.split(".")
    seen, bad, todo = set(), {}, [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
    while todo:
        mod = todo.pop()
        if mod in seen:
            continue
        seen.add(mod)
        path = _module_path(mod)
        if path is None:
            continue
        for name in _imports(path, mod, lazy_too=mod == root):
            top = name.split(".")[0]
            if top in BANNED:
                bad.setdefault(mod, []).append(name)
            elif top == "kohort":
                todo.append(name)
                parts = name.split(".")
                todo += [".".join(parts[:i]) for i in range(2, len(parts))]    # parent packages run too
    return bad


@pytest.mark.parametrize("root", ["kohort.client.consumer.membership", "kohort.broker.coordinator",
                                  "kohort.broker.share.partition", "kohort.broker.share.state",
                                  "kohort.broker.share.group", "kohort.client.share.membership",
                                  "kohort.client.share.acknowledgements", "kohort.client.share.session",
                                  "kohort.broker.share.sessions"])
def test_pure_state_machines_import_no_io(root):
    assert closure(root) == {}


def test_the_check_sees_a_banned_import():
    assert "kohort.client.consumer.group" in closure("kohort.client.consumer.group")
