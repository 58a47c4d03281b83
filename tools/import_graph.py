"""Print which of the repository's packages import which, read from the source with ``ast`` (nothing is imported).

Usage (from the repository root):
  python -m tools.import_graph [--root DIR] [--modules | --loads MODULE]

Nodes are the top-level packages (``engine``, ``clip``, ``datasets``, ``trainers``, ``analysis``, ``tools``, ``demo``)
and the top-level command lines (``train``, ``parse_test_res``); ``tests`` is left out. An import anywhere in a file
counts, deferred imports inside functions included. ``--modules`` lists, under each edge, the project modules
imported across it; ``--loads MODULE`` lists every project module that importing MODULE runs (module-level imports
followed, package ``__init__`` files included, which is where import side effects hide). ``--root`` reads another
checkout (e.g. an older commit's worktree).

docs/ARCHITECTURE.md draws the graph; tests/test_import_graph.py checks the drawing against this reading.
"""
from __future__ import annotations

import argparse
import ast
import os
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

SKIPPED = ("tests",)
ROOT = str(Path(__file__).resolve().parents[1])


@dataclass(frozen=True)
class Import:
    """One project import: the importing module and the project module it names (both dotted)."""

    importer: str
    imported: str
    deferred: bool = False
    """Inside a function body: runs when the function is called, not when the importer is imported."""

    @property
    def edge(self) -> tuple[str, str]:
        """(importing node, imported node): the first component of each dotted name."""
        return self.importer.split(".")[0], self.imported.split(".")[0]


def project_modules(root: str) -> dict[str, str]:
    """Dotted name -> file of every Python module of the project under ``root`` (``tests`` and hidden folders aside)."""
    modules = {}
    for entry in sorted(os.listdir(root)):
        path = os.path.join(root, entry)
        if entry.endswith(".py"):
            modules[entry[:-3]] = path
        elif os.path.isfile(os.path.join(path, "__init__.py")) and entry not in SKIPPED:
            for folder, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")))
                package = os.path.relpath(folder, root).replace(os.sep, ".")
                for name in sorted(files):
                    if name.endswith(".py"):
                        modules[package if name == "__init__.py" else f"{package}.{name[:-3]}"] = \
                            os.path.join(folder, name)
    return modules


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute dotted module of a ``from ... import`` statement (relative ones resolved against ``module``)."""
    if not node.level:
        return node.module or ""
    parts = module.split(".") if is_package else module.split(".")[:-1]
    base = parts[: len(parts) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(module: str, path: str, modules: dict[str, str]) -> list[Import]:
    """The project modules that ``module`` (file ``path``) imports; ``from pkg import sub`` names ``pkg.sub`` when
    ``sub`` is a module."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    is_package = path.endswith("__init__.py")
    found: dict[str, bool] = {}  # imported module -> deferred (only inside functions)

    def visit(node: ast.AST, deferred: bool) -> None:
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, is_package, node)
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        for name in names:
            found[name] = found.get(name, True) and deferred
        inside = deferred or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, inside)

    visit(tree, False)
    tops = {name.split(".")[0] for name in modules}
    return [Import(module, name, deferred) for name, deferred in found.items()
            if name.split(".")[0] in tops and name != module]


def project_imports(root: str = ROOT) -> list[Import]:
    """Every import of a project module by a project module, in module order."""
    modules = project_modules(root)
    return [imp for module, path in modules.items() for imp in imports_of(module, path, modules)]


def loads(start: str, imports: Sequence[Import]) -> list[str]:
    """The project modules that importing ``start`` executes: its module-level imports, transitively, and the
    ``__init__`` of every package on the way (importing ``a.b.c`` runs ``a`` and ``a.b`` first)."""
    by_importer: dict[str, list[str]] = defaultdict(list)
    for imp in imports:
        if not imp.deferred:
            by_importer[imp.importer].append(imp.imported)
    seen: set[str] = set()
    todo = [start]
    while todo:
        module = todo.pop()
        parts = module.split(".")
        for name in (".".join(parts[:i]) for i in range(1, len(parts) + 1)):
            if name not in seen:
                seen.add(name)
                todo += by_importer.get(name, [])
    return sorted(seen - {start})


def graph(imports: Sequence[Import]) -> dict[str, dict[str, list[str]]]:
    """Importing node -> imported node -> the imported project modules, sorted (imports within a node left out)."""
    edges: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for imp in imports:
        source, target = imp.edge
        if source != target:
            edges[source][target].add(imp.imported)
    return {source: {target: sorted(edges[source][target]) for target in sorted(edges[source])}
            for source in sorted(edges)}


def render(edges: dict[str, dict[str, list[str]]], nodes: Sequence[str], modules: bool = False) -> str:
    """One line per node, ``node -> imported nodes`` (``-> nothing`` for a leaf); with ``modules`` the imported
    modules under each edge."""
    lines = []
    for node in nodes:
        targets = edges.get(node, {})
        lines.append(f"{node} -> {', '.join(targets) if targets else 'nothing'}")
        if modules:
            lines += [f"    {target}: {', '.join(names)}" for target, names in targets.items()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print the import graph of the repository's packages.")
    parser.add_argument("--root", default=ROOT, help="repository checkout to read (default: this one)")
    parser.add_argument("--modules", action="store_true", help="also list the modules imported across each edge")
    parser.add_argument("--loads", metavar="MODULE", help="instead, list the project modules importing MODULE runs")
    args = parser.parse_args(argv)
    imports = project_imports(args.root)
    if args.loads:
        print("\n".join(loads(args.loads, imports)))
        return 0
    nodes = sorted({name.split(".")[0] for name in project_modules(args.root)})
    print(render(graph(imports), nodes, args.modules))
    return 0


if __name__ == "__main__":
    sys.exit(main())
