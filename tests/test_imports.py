"""The package's imports run one way: ingest -> tokenize -> measure -> engine -> emit, verify beside them.

Walks every module's import statements (ast, so imports inside functions and under TYPE_CHECKING count too)
and checks each against the stage order of docs/development.md, and that no two modules import each other
(directly or through a cycle).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "advisor"

# Stage of each module (longest matching prefix wins). A module may import modules of its own stage or of a
# lower one; `verify` stands beside the pipeline: it may use the bottom, ingest, tokenize and measure, and
# nothing of the pipeline may use it.
BOTTOM, INGEST, TOKENIZE, MEASURE, ENGINE, EMIT, PROFILE, CLI = range(8)
VERIFY = "verify"
STAGES: dict[str, int | str] = {
    "advisor": BOTTOM,  # the package __init__: version and the public record types
    "advisor.errors": BOTTOM,
    "advisor.record": BOTTOM,
    "advisor.vllm_vocab": BOTTOM,
    "advisor.hardware": BOTTOM,
    "advisor.report": BOTTOM,
    "advisor.lint": BOTTOM,  # checks configs against vllm_vocab and hardware; the engine validates with it
    "advisor.ingest": INGEST,
    "advisor.tokenize": TOKENIZE,
    "advisor.measure": MEASURE,
    "advisor.engine": ENGINE,
    "advisor.emit": EMIT,
    "advisor.profile": PROFILE,  # wires the stages together
    "advisor.stream": PROFILE,  # the profile's streaming collection (tokenize + measure per batch, workers)
    "advisor.shards": PROFILE,  # the same collection as parallel shards on Ray, merged
    "advisor.pipes": PROFILE,  # the workers' results back to the collection, arrays out of band
    "advisor.verify": VERIFY,
    "advisor.cli": CLI,
}
VERIFY_MAY_IMPORT = {BOTTOM, INGEST, TOKENIZE, MEASURE, VERIFY}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _stage(module: str) -> int | str:
    for prefix in sorted(STAGES, key=len, reverse=True):
        if module == prefix or module.startswith(prefix + "."):
            return STAGES[prefix]
    raise AssertionError(f"{module}: no stage in tests/test_imports.py STAGES; add it")


def _imports(path: Path, module: str) -> set[str]:
    """Modules of the package that `module` imports (absolute and relative imports, `from pkg import sub`)."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] == "advisor")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if base.split(".")[0] != "advisor":
                continue
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if candidate in MODULES else base)
    return {name for name in found if name != module}


MODULES = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
GRAPH = {module: _imports(path, module) for module, path in MODULES.items()}


def _allowed(importer: str, imported: str) -> bool:
    source, target = _stage(importer), _stage(imported)
    if source == VERIFY:
        return target in VERIFY_MAY_IMPORT
    if target == VERIFY:
        return source == CLI
    return target <= source


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_imports_a_later_stage(module: str) -> None:
    wrong = sorted(name for name in GRAPH[module] if not _allowed(module, name))
    assert not wrong, f"{module} (stage {_stage(module)}) imports a later stage: {wrong}"


def test_no_import_cycles() -> None:
    """No two modules import each other, directly or around a longer loop (a package's __init__ re-exporting
    its own submodules is the one allowed back edge: Python resolves it, and no stage is crossed)."""

    def edges(module: str) -> set[str]:
        return {name for name in GRAPH[module]
                if name in GRAPH and not (MODULES[name].name == "__init__.py" and module.startswith(name + "."))}

    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for name in sorted(edges(module)):
            if state.get(name) == 1:
                cycle = stack[stack.index(name):] + [name]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if name not in state:
                visit(name)
        stack.pop()
        state[module] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module)


def test_the_walk_sees_real_imports() -> None:
    """Guards the walker itself: known edges are found, including one inside a function."""
    assert "advisor.engine.decide" in GRAPH["advisor.profile"]  # imported inside build_profile
    assert "advisor.report" in GRAPH["advisor.engine.decide"]
    assert "advisor.measure.ngram" in GRAPH["advisor.measure.specreplay"]  # `from advisor.measure import ngram`
