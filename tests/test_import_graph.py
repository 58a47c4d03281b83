"""The import graph docs/ARCHITECTURE.md draws holds in the code, read with ``ast`` (tools/import_graph.py).

The document's table of import rules is parsed here and is the only declaration of the allowed edges: every import
between packages must be allowed by it, every entry of it must be used, the graph has no cycle, the light package
``__init__`` files import nothing, and no module changes process-wide state at import time.
"""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from graphlib import TopologicalSorter

import pytest

from tests.helpers_run import HANG_GUARD_S
from tools.import_graph import Import, graph, loads, project_imports, project_modules

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARCHITECTURE = os.path.join(REPO, "docs", "ARCHITECTURE.md")
LIGHT_PACKAGES = ("trainers", "datasets", "analysis", "tools", "demo", "bench")
ENTRY_GUARDS = {ast.unparse(ast.parse(test, mode="eval").body)
                for test in ('__name__ == "__main__"', "not __package__")}
"""Module-level ``if`` tests whose block runs only when the file is run as a program."""


def documented_rules() -> dict[str, list[str]]:
    """The ``| package | imports of the project |`` table of ARCHITECTURE.md: row -> allowed names ([] = nothing)."""
    with open(ARCHITECTURE, encoding="utf-8") as f:
        lines = f.read().splitlines()
    start = lines.index("| package | imports of the project |") + 2
    rules = {}
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rules[cells[0].strip("`")] = re.findall(r"`([\w.]+)`", cells[1])
    return rules


RULES = documented_rules()
IMPORTS = project_imports(REPO)


def allowed(imp: Import) -> bool:
    return any(imp.imported == name or imp.imported.startswith(name + ".") for name in RULES[imp.edge[0]])


def test_every_package_has_one_rule():
    assert sorted(RULES) == sorted({name.split(".")[0] for name in project_modules(REPO)})


def test_every_import_between_packages_is_documented():
    crossing = [imp for imp in IMPORTS if imp.edge[0] != imp.edge[1]]
    assert len(crossing) > 50
    assert [f"{imp.importer} imports {imp.imported}" for imp in crossing if not allowed(imp)] == []


def test_every_documented_edge_is_used():
    edges = graph(IMPORTS)
    for package, names in RULES.items():
        documented = {name.split(".")[0] for name in names}
        assert set(edges.get(package, {})) == documented, package
        for name in names:  # a module named on its own (e.g. trainers.routing.routers) is imported
            assert any(imp.imported == name or imp.imported.startswith(name + ".") for imp in IMPORTS
                       if imp.edge[0] == package), (package, name)


def test_the_product_imports_no_bench():
    """bench/ sits on top: no row of the product may list it, and no module of the product imports it (deferred
    imports counted), so a user's run never loads a benchmark."""
    assert [package for package, names in RULES.items() if package != "bench" and
            any(name.split(".")[0] == "bench" for name in names)] == []
    assert [f"{imp.importer} imports {imp.imported}" for imp in IMPORTS
            if imp.edge[1] == "bench" and imp.edge[0] != "bench"] == []
    assert any(imp.edge[0] == "bench" and imp.edge[1] != "bench" for imp in IMPORTS)  # the reading sees bench/


def test_arrows_point_down_only():
    order = list(TopologicalSorter({package: set(targets) for package, targets in graph(IMPORTS).items()})
                 .static_order())
    assert order.index("engine") == 0 and order[-2:] == ["demo", "bench"]


def test_the_engine_modules_import_one_another_without_a_cycle():
    """Within ``engine`` (deferred imports counted: they run too) the modules form no circle, so each can be read and
    changed from the bottom up."""
    edges: dict[str, set[str]] = {}
    for imp in IMPORTS:
        if imp.edge == ("engine", "engine"):
            edges.setdefault(imp.importer, set()).add(imp.imported)
    assert len(edges) > 10
    list(TopologicalSorter(edges).static_order())  # raises CycleError naming the circle


def test_the_reading_of_imports():
    """Hand-read imports of three files: relative imports resolved, ``from pkg import module`` named as the module,
    deferred (function-level) imports flagged."""
    def of(module: str) -> dict[str, bool]:
        return {imp.imported: imp.deferred for imp in IMPORTS if imp.importer == module}

    assert of("analysis.dumps") == {"analysis.errors": False, "analysis.layout": False, "engine.utils": False,
                                    "trainers.routing.routers": False}
    assert of("trainers.routing.evaluation") == {"trainers.routing.routers": False}  # `from .routing import ...`
    # `from analysis import stats` names the module
    assert of("demo.report") == {"analysis.stats": False, "analysis.transfer": False, "analysis.report": False,
                                 "engine.runs": False, "engine.utils": False, "trainers.catalog": False}
    train = of("train")
    assert train["datasets.catalog"] and train["trainers.catalog"] and train["engine.errors"]  # all deferred
    assert not any(imp.edge[0] == "tests" for imp in IMPORTS)


@pytest.mark.parametrize("package", LIGHT_PACKAGES)
def test_package_init_imports_nothing(package):
    assert loads(package, IMPORTS) == []


def _state_changes(tree: ast.Module) -> list[str]:
    """Module-level statements (outside functions and entry-point guards) that chdir, or edit os.environ or
    sys.path."""
    found = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            return
        if isinstance(node, ast.If) and ast.unparse(node.test) in ENTRY_GUARDS:
            return
        text = ast.unparse(node) if isinstance(node, (ast.Expr, ast.Assign, ast.AugAssign)) else ""
        if re.search(r"os\.(chdir|putenv)\(|os\.environ\b.*(=|\.(setdefault|update|pop)\()|"
                     r"sys\.path\b.*(=|\.(insert|append|extend)\()", text):
            found.append(f"line {node.lineno}: {text}")
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def test_the_state_check_sees_what_it_should():
    tree = ast.parse('import os, sys\nos.environ.setdefault("X", "1")\nsys.path.insert(0, "x")\n'
                     'if __name__ == "__main__":\n    os.chdir("/")\ndef f():\n    os.chdir("/")\n')
    assert [line.split(":")[0] for line in _state_changes(tree)] == ["line 2", "line 3"]


def test_no_module_changes_process_state_when_imported():
    changes = {}
    for module, path in project_modules(REPO).items():
        with open(path, encoding="utf-8") as f:
            found = _state_changes(ast.parse(f.read()))
        if found:
            changes[module] = found
    assert changes == {}


IMPORT_EVERY_MODULE = """
import atexit, importlib, json, signal, sys

project = set(json.loads(sys.argv[1]))
changes = []


def recorded(name, original):
    def call(*args, **kwargs):
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if caller in project:
            changes.append(f"{caller}: {name}")
        return original(*args, **kwargs)
    return call


atexit.register = recorded("atexit.register", atexit.register)
signal.signal = recorded("signal.signal", signal.signal)
for module in sorted(project):
    importlib.import_module(module)
print(json.dumps(changes))
"""
"""Imports the given project modules in a fresh process and prints the exit handlers and signal handlers their
module-level code installed."""


def _installed_at_import(modules: list[str]) -> list[str]:
    done = subprocess.run([sys.executable, "-c", IMPORT_EVERY_MODULE, json.dumps(modules)], cwd=REPO,
                          capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_the_import_check_sees_an_exit_handler(tmp_path):
    (tmp_path / "registers_at_import.py").write_text("import atexit, signal\natexit.register(print)\n"
                                                     "signal.signal(signal.SIGUSR2, signal.SIG_IGN)\n")
    done = subprocess.run([sys.executable, "-c", IMPORT_EVERY_MODULE, json.dumps(["registers_at_import"])],
                          cwd=tmp_path, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert json.loads(done.stdout) == ["registers_at_import: atexit.register", "registers_at_import: signal.signal"]


def test_no_module_installs_an_exit_or_signal_handler_when_imported():
    """Importing any module of the project (engine.preemption included) leaves atexit and the signal handlers as
    they were; the entry points install theirs when they run (a package's ``__main__`` is a program, not imported)."""
    modules = sorted(name for name in project_modules(REPO) if not name.endswith(".__main__"))
    assert _installed_at_import(modules) == []


TRAINER_PARTS = ("prompting", "routing", "distillation")
"""The subpackages of ``trainers`` holding what the methods share, each below the next: routing and distillation
build on prompting."""


def trainer_modules() -> list[str]:
    """The modules of ``trainers`` (package ``__init__`` files aside)."""
    return [name for name, path in project_modules(REPO).items()
            if name.startswith("trainers.") and not path.endswith("__init__.py")]


def test_trainers_top_level_holds_the_methods_and_their_list():
    """A reader of ``trainers/`` sees the methods (one module per catalog row), the catalog and the config; every
    other module lives in one of the parts' subpackages."""
    from trainers.catalog import TRAINERS

    top = {name for name in trainer_modules() if name.count(".") == 1}
    assert top == set(TRAINERS.values()) | {"trainers.catalog", "trainers.config"}
    assert {name.split(".")[1] for name in trainer_modules() if name.count(".") == 2} == set(TRAINER_PARTS)


def test_trainers_parts_import_no_method_and_point_down():
    """A part imports no method module (the catalog aside: the list of them), the parts import one another only
    downwards (``TRAINER_PARTS`` order), and the modules of ``trainers`` form no circle."""
    from trainers.catalog import TRAINERS

    within = [imp for imp in IMPORTS if imp.edge == ("trainers", "trainers")]

    def part(module: str) -> str:
        return module.split(".")[1] if module.count(".") == 2 else ""

    upward = [f"{imp.importer} imports {imp.imported}" for imp in within if part(imp.importer) and (
        imp.imported in TRAINERS.values() or
        (part(imp.imported) and TRAINER_PARTS.index(part(imp.imported)) > TRAINER_PARTS.index(part(imp.importer))))]
    assert upward == []
    assert any(part(imp.importer) == "routing" and part(imp.imported) == "prompting" for imp in within)
    edges: dict[str, set[str]] = {}
    for imp in within:
        edges.setdefault(imp.importer, set()).add(imp.imported)
    list(TopologicalSorter(edges).static_order())  # raises CycleError naming the circle


def test_the_routed_plug_ins_import_only_the_method_they_route_on():
    """θ_u is a shared part (``trainers/prompting/unseen_branch.py``): PETR+X imports no method module (it reads X's
    trainer through the registry), PETR+CoOp only CoOp, whose context is its seen branch."""
    from trainers.catalog import TRAINERS

    methods = set(TRAINERS.values())
    imported = {(imp.importer, imp.imported) for imp in IMPORTS if imp.edge == ("trainers", "trainers")}
    assert {b for a, b in imported if a == "trainers.petr_x" and b in methods} == set()
    assert {b for a, b in imported if a == "trainers.petr_coop" and b in methods} == {"trainers.coop"}
