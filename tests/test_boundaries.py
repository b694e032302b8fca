"""Package boundaries of docs/architecture.md, enforced on the source (as ruff's banned-api does)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "corefold"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    mods = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            mods.add(node.module)
    return mods


def _sources():
    return [p for p in ROOT.rglob("*.py") if not p.name.endswith("_test.py")]


def test_only_the_onnx_frontend_imports_onnx():
    offenders = []
    for path in _sources():
        rel = path.relative_to(ROOT)
        if rel.parts[:2] == ("frontend", "onnx"):
            continue
        if any(m == "onnx" or m.startswith("onnx.") for m in _imports(path)):
            offenders.append(str(rel))
    assert offenders == []


def test_mapping_never_sees_the_ir():
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "mapping").rglob("*.py")
                 if not p.name.endswith("_test.py") and "expand" not in p.name and "generate" not in p.name
                 and any(m.startswith("corefold.ir") or m.startswith("corefold.frontend") for m in _imports(p))]
    assert offenders == []


def test_ir_depends_only_on_ops_and_errors():
    offenders = []
    for path in (ROOT / "ir").rglob("*.py"):
        if path.name.endswith("_test.py"):
            continue
        for m in _imports(path):
            if m.startswith("corefold.") and not m.startswith(("corefold.ir", "corefold.ops", "corefold.errors")):
                offenders.append((str(path.relative_to(ROOT)), m))
    assert offenders == []


def test_library_code_never_imports_the_cli():
    offenders = [str(p.relative_to(ROOT)) for p in _sources()
                 if p.relative_to(ROOT).parts[0] not in ("cli", "__main__.py")
                 and any(m == "corefold.cli" or m.startswith("corefold.cli.") for m in _imports(p))]
    assert offenders == []


def test_sim_reads_the_executable_and_the_kernels_never_the_passes():
    """sim/ runs what the backend wrote, with the executor's kernels: it never reaches into the
    compiler's passes (nor the frontend, nor the mapper) to recompute what lowering decided."""
    banned = ("corefold.passes", "corefold.frontend", "corefold.mapping", "corefold.pipeline", "corefold.cli")
    sources = [p for p in (ROOT / "sim").rglob("*.py") if not p.name.endswith("_test.py")]
    assert sources, "corefold/sim is missing"
    offenders = [(str(p.relative_to(ROOT)), m) for p in sources for m in _imports(p) if m.startswith(banned)]
    assert offenders == []
