"""Layering: every module DESIGN.md calls pure -- protocol/ (sans I/O), the assignors, the client's
group members (membership.py, membership_848.py, membership_common.py), the transactional
producer's machine (txn_manager.py), the broker's group coordinators (broker/coordinator/), the
transaction coordinator (broker/txn/coordinator.py), the authorizer, the admin clients' shared half
(client/admin_protocol.py) and the group configs' rules (broker/group_configs.py) -- imports no socket, TLS,
selector, subprocess, thread, clock or event loop, directly or through any kohort module it imports
(time comes in as `now_ms`, I/O is its driver's). One banned list, one check, one case per module;
each of them has a header docstring saying what lives there."""
import ast
import functools
import pathlib

import pytest

SRC = pathlib.Path(__file__).resolve().parents[1] / "src"
BANNED = {"asyncio", "socket", "ssl", "selectors", "select", "subprocess", "multiprocessing", "threading",
          "_thread", "concurrent", "time", "datetime"}
# what DESIGN.md calls pure: whole packages (every module in them, new ones included) and single modules
PURE_PACKAGES = ["kohort/protocol", "kohort/assignors", "kohort/broker/coordinator", "kohort/broker/share"]
PURE_MODULES = ["kohort.client.consumer.membership", "kohort.client.consumer.membership_848",
                "kohort.client.consumer.membership_common", "kohort.client.txn_manager",
                "kohort.broker.txn.coordinator", "kohort.broker.authorizer",
                "kohort.client.share.membership", "kohort.client.share.session",
                "kohort.client.share.acknowledgements", "kohort.client.admin_protocol",
                "kohort.broker.group_configs"]


def _module_name(path: pathlib.Path) -> str:
    name = ".".join(path.relative_to(SRC).with_suffix("").parts)
    return name.removesuffix(".__init__")


def pure_modules() -> list[str]:
    found = [_module_name(p) for pkg in PURE_PACKAGES for p in sorted((SRC / pkg).rglob("*.py"))]
    return found + PURE_MODULES


def _module_path(name: str) -> pathlib.Path | None:
    base = SRC.joinpath(*name.split("."))
    if base.with_suffix(".py").exists():
        return base.with_suffix(".py")
    if (base / "__init__.py").exists():
        return base / "__init__.py"
    return None


def _is_type_checking(test) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _load_time_nodes(tree):
    """Nodes that run when the module is imported (function bodies run later, if ever; an
    `if TYPE_CHECKING:` block never runs)."""
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            todo.extend(node.orelse)
            continue
        yield node
        todo.extend(ast.iter_child_nodes(node))


@functools.lru_cache(maxsize=None)
def _imports(path: pathlib.Path, module: str, lazy_too: bool = False) -> tuple[str, ...]:
    """The modules `path` (module `module`) imports at load time (`lazy_too`: anywhere); each file is parsed
    once per run, as every pure module's closure walks many of the same files."""
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
    return tuple(out)


def closure(root: str) -> dict[str, list[str]]:
    """{kohort module: [banned stdlib modules it imports]} over everything `root` imports: the root's
    imports anywhere (inside functions too), the load-time imports of the kohort modules it reaches
    and of their parent packages."""
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


@pytest.mark.parametrize("module", pure_modules())
def test_pure_module_imports_no_io(module):
    path = _module_path(module)
    assert path is not None, f"{module} is listed as pure but does not exist"
    assert closure(module) == {}
    assert ast.get_docstring(ast.parse(path.read_text())), f"{module} has no header docstring"


def test_every_pure_package_is_covered():
    mods = pure_modules()
    assert len([m for m in mods if m.startswith("kohort.protocol.")]) > 40
    assert "kohort.broker.coordinator.consumer_group" in mods and "kohort.assignors.uniform" in mods


def test_the_check_sees_a_banned_import(tmp_path):
    """Direct (the driver), through a kohort module, and inside a function of the module checked."""
    assert "kohort.client.consumer.group" in closure("kohort.client.consumer.group")
    assert "kohort.client.network" in closure("kohort.client.producer")
    lazy = tmp_path / "lazy.py"
    lazy.write_text("def f():\n    import socket\n    from time import monotonic\n")
    assert _imports(lazy, "kohort.lazy", lazy_too=True) == ("socket", "time", "time.monotonic")
    assert _imports(lazy, "kohort.lazy") == ()
