"""The architecture, enforced (README "Architecture"): who may import whom, how large a module or a
function may grow, and what crosses a module boundary. An AST walk over src/gpuplan: it reads
every import, including the ones inside functions, so a lazy import cannot slip past."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "gpuplan"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
# Data tables written as one function body (a literal mapping per case): none today.
LONG_FUNCTION_ALLOWED: set[tuple[str, str]] = set()

# package (first part under gpuplan/) -> the gpuplan packages it may import
ALLOWED = {
    # the validated boundary (values, documents, files from outside): below everything that reads input
    "bounds": {"bounds", "errors"},
    "outfiles": {"outfiles", "errors"},
    "spec": {"spec", "errors", "units"},
    "catalog": {"catalog", "spec", "errors", "units", "bounds"},
    "model": {"model", "spec", "catalog", "errors", "units"},
    "search": {"search", "model", "spec", "catalog", "errors", "units"},
    "io": {"io", "spec", "catalog", "errors", "units", "bounds"},
    # report turns answers into words, tables and pictures; it never computes a prediction
    "report": {"report", "spec", "catalog", "errors", "units", "outfiles"},
    # the web page and JSON API: the public API and the CLI's own readers, words and exports; no model logic
    "serve": {"serve", "api", "io", "report", "search", "spec", "catalog", "errors", "units", "flags", "export",
              "validation", "bounds"},
}
FORBIDDEN_THIRD_PARTY = {
    "bounds": {"torch", "sqlite3"},
    "spec": {"torch", "yaml", "sqlite3"},
    "catalog": {"torch", "sqlite3"},
    "model": {"torch", "yaml", "sqlite3"},
    "search": {"torch", "yaml", "sqlite3"},
    "report": {"torch", "sqlite3"},
    "serve": {"torch"},
}


def _modules() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py"))


def _package(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0].removesuffix(".py") if len(rel.parts) > 1 else rel.stem


def _type_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes under ``if TYPE_CHECKING:``: they name types, they never run."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            out |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return out


def _imports(tree: ast.AST) -> list[str]:
    out = []
    skip = _type_only(tree)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "gpuplan":
                out += [f"gpuplan.{a.name}" for a in node.names]
            else:
                out.append(node.module)
    return out


def _violations() -> list[str]:
    bad = []
    for path in _modules():
        pkg = _package(path)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for name in _imports(tree):
            parts = name.split(".")
            if parts[0] == "gpuplan" and len(parts) > 1 and pkg in ALLOWED:
                if parts[1] not in ALLOWED[pkg]:
                    bad.append(f"{path.relative_to(SRC)} imports {name} ({pkg}/ may import {sorted(ALLOWED[pkg])})")
            elif parts[0] in FORBIDDEN_THIRD_PARTY.get(pkg, ()):
                bad.append(f"{path.relative_to(SRC)} imports {name}")
    return bad


def test_layers_import_only_what_they_may():
    assert _violations() == []


def test_cli_holds_no_model_logic():
    """cli.py parses flags and dispatches: it reaches the model only through the public API and the
    io/report/search layers, never a formula module."""
    tree = ast.parse((SRC / "cli.py").read_text(encoding="utf-8"))
    direct = [n for n in _imports(tree) if n.startswith("gpuplan.model")]
    assert direct == []


def test_the_walk_sees_lazy_imports():
    # an import inside a function counts: the check is not a formality
    tree = ast.parse("def f():\n    from gpuplan.io.scenario import parse_scenario\n    import torch\n"
                     "if TYPE_CHECKING:\n    from gpuplan.search.plan import PlanResult\n")
    assert _imports(tree) == ["gpuplan.io.scenario", "torch"]


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_module_size(path: Path):
    assert len(path.read_text(encoding="utf-8").splitlines()) <= MAX_MODULE_LINES


def _long_functions() -> list[str]:
    out = []
    for path in _modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                key = (str(path.relative_to(SRC)), node.name)
                if length > MAX_FUNCTION_LINES and key not in LONG_FUNCTION_ALLOWED:
                    out.append(f"{key[0]}:{node.name} is {length} lines")
    return out


def test_function_size():
    assert _long_functions() == []


def _wide_tuples() -> list[str]:
    """Public functions (the ones other modules call) that return a tuple of more than three values."""
    out = []
    for path in _modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or node.name.startswith("_"):
                continue
            ann = node.returns
            if isinstance(ann, ast.Subscript) and isinstance(ann.value, ast.Name) and ann.value.id == "tuple" \
                    and isinstance(ann.slice, ast.Tuple) and len(ann.slice.elts) > 3 \
                    and not any(isinstance(e, ast.Constant) and e.value is Ellipsis for e in ann.slice.elts):
                out.append(f"{path.relative_to(SRC)}:{node.name} -> {ast.unparse(ann)}")
            for ret in ast.walk(node):
                if isinstance(ret, ast.Return) and isinstance(ret.value, ast.Tuple) and len(ret.value.elts) > 3:
                    out.append(f"{path.relative_to(SRC)}:{node.name} returns {len(ret.value.elts)} values")
    return out


def test_no_wide_tuples_cross_modules():
    assert _wide_tuples() == []


def test_the_model_and_the_search_load_no_parser_report_store_or_torch():
    """Importing the model and the search (the planner's path) loads none of io/, report/, the public API,
    the web server, YAML, SQLite or torch — checked in a fresh interpreter, so any import chain counts,
    not only the direct ones the AST walk sees (the package face is lazy: gpuplan/__init__.py)."""
    import subprocess
    import sys

    code = ("import sys, gpuplan.model.estimate, gpuplan.model.memory, gpuplan.model.runtime, gpuplan.search.plan, "
            "gpuplan.search.fit; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('yaml', 'sqlite3', 'torch') or "
            "m.startswith(('gpuplan.io', 'gpuplan.report', 'gpuplan.api', 'gpuplan.serve', 'gpuplan.cli'))); "
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def test_the_package_face_is_lazy_and_complete():
    import subprocess
    import sys

    code = ("import sys, gpuplan; before = 'gpuplan.api' in sys.modules; "
            "names = [getattr(gpuplan, n) for n in gpuplan.__all__]; "
            "print(before, 'gpuplan.api' in sys.modules, len(names))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["False", "True", str(len(__import__("gpuplan").__all__))]
