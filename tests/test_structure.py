"""Module hygiene, read from the source with ast (issue 10's rules, as METIS and KaHIP keep
one phase per file): no import cycle among corefold modules (module-level imports; those
under ``if TYPE_CHECKING:`` and inside functions do not count, and a package's
``__init__`` re-exporting its submodules is not a cycle), no import of another module's
private name, no library module importing ``corefold.cli``, no module over 600 lines."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "corefold"
MAX_LINES = 600


def _modules() -> dict[str, Path]:
    mods = {}
    for p in PKG.rglob("*.py"):
        if p.name.endswith("_test.py"):
            continue
        name = ".".join(p.relative_to(ROOT).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = p
    return mods


MODULES = _modules()
PACKAGES = {m for m, p in MODULES.items() if p.name == "__init__.py"}


def _resolve(module: str | None, level: int, current: str, is_package: bool) -> str:
    if level == 0:
        return module or ""
    base = current.split(".") if is_package else current.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _imports(name: str, path: Path):
    """(target module, imported names, module level?, under TYPE_CHECKING?) per import."""
    tree = ast.parse(path.read_text(), str(path))
    parents = {c: n for n in ast.walk(tree) for c in ast.iter_child_nodes(n)}

    def ancestors(node):
        p = parents.get(node)
        while p is not None:
            yield p
            p = parents.get(p)

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = _resolve(node.module, node.level, name, path.name == "__init__.py")
            names = [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            target = next((a.name for a in node.names if a.name.startswith("corefold")), "")
            names = []
        else:
            continue
        if not target.startswith("corefold"):
            continue
        anc = list(ancestors(node))
        typing_only = any(isinstance(a, ast.If) and "TYPE_CHECKING" in ast.unparse(a.test) for a in anc)
        top = not any(isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef)) for a in anc)
        yield target, names, top, typing_only


def _edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {m: set() for m in MODULES}
    for m, p in MODULES.items():
        for target, names, top, typing_only in _imports(m, p):
            if typing_only or not top:
                continue
            for n in names:
                if f"{target}.{n}" in MODULES:
                    edges[m].add(f"{target}.{n}")
            if target in MODULES and target != m:
                edges[m].add(target)
    return edges


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """A cycle among non-package modules, or None (iterative DFS, O(V + E))."""
    nodes = [m for m in edges if m not in PACKAGES]
    sub = {m: [w for w in edges[m] if w in edges and w not in PACKAGES] for m in nodes}
    state: dict[str, int] = {}
    for root in nodes:
        if root in state:
            continue
        stack = [(root, iter(sub[root]))]
        path = [root]
        state[root] = 1
        while stack:
            v, it = stack[-1]
            w = next(it, None)
            if w is None:
                state[v] = 2
                stack.pop()
                path.pop()
            elif state.get(w) == 1:
                return path[path.index(w):] + [w]
            elif w not in state:
                state[w] = 1
                stack.append((w, iter(sub[w])))
                path.append(w)
    return None


def test_no_import_cycle():
    assert _cycle(_edges()) is None


def test_the_cycle_check_finds_a_cycle():
    assert _cycle({"corefold.a": {"corefold.b"}, "corefold.b": {"corefold.a"}}) == ["corefold.a", "corefold.b",
                                                                                  "corefold.a"]


def test_no_module_imports_another_modules_private_name():
    offenders = []
    for m, p in MODULES.items():
        for target, names, _, _ in _imports(m, p):
            for n in names:
                if n.startswith("_") and not n.startswith("__") and f"{target}.{n}" not in MODULES and target != m:
                    offenders.append(f"{m} takes {n} from {target}")
    assert offenders == []


def test_no_module_over_600_lines():
    long = {m: len(p.read_text().splitlines()) for m, p in MODULES.items()}
    assert {m: n for m, n in long.items() if n > MAX_LINES} == {}
