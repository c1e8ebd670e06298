"""The suite's import graph as it runs, not only as its ``import`` statements read: grimp's
graph plus the links an import linter cannot see, each with the file and line it was found at.

Hidden links added (:func:`hidden_edges`):

- ``importlib.import_module("a.b")`` / ``__import__("a.b")`` with a literal name, anywhere (a
  lazy ``lambda: importlib.import_module(...)`` included);
- ``importlib.import_module(f"a.{name}")``: every module of package ``a`` the call can reach —
  where the result is read as ``.ATTR`` (or ``getattr(..., "ATTR")``) the modules that define
  ``ATTR``; the modules the enclosing function filters out (``name not in SKIP``, ``ispkg``,
  ``startswith("_")``) are left out, as they are at run time;
- ``Registered("SECTION")`` / ``table("SECTION")`` (:mod:`seqprobe.registry`): every module
  that table of seqprobe/registry.toml names (the reader imports them by name later);
- a string constant that is a suite module's dotted name, or ``"module:attr"`` (a table of
  module paths read by ``importlib`` later), in code (docstrings are prose, not tables);
- ``[project.entry-points."GROUP"]`` of pyproject.toml: the module that reads ``GROUP``
  (``entry_points(group=...)``) links to each module the group names.

:func:`run_graph` then says what importing each module runs: the modules it links to and, for
each, the package ``__init__``s above it (``import a.b.c`` runs ``a`` and ``a.b`` first).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import grimp
import networkx as nx

try:
    import tomllib
except ImportError:  # Python 3.10: pytest itself depends on tomli there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("seqprobe", "tasks", "models", "probes", "analyses", "figures", "bench")
# lowest first; figures is plotting style beside the others: it may import seqprobe only
RANK = {"seqprobe": 0, "figures": 0.5, "tasks": 1, "models": 2, "probes": 3, "analyses": 4,
        "bench": 5}
IMPORTERS = {"import_module", "__import__"}
READERS = {"Registered", "table"}  # seqprobe.registry's readers of one table
REGISTRY = Path("seqprobe") / "registry.toml"


@dataclass(frozen=True)
class Edge:
    """``importer`` links to ``imported``; ``where`` is ``file:line``, ``how`` the kind."""

    importer: str
    imported: str
    where: str
    how: str

    def __str__(self) -> str:
        return f"{self.importer} -> {self.imported} ({self.how}, {self.where})"


def module_files(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Module name -> source file, for every ``.py`` under ``packages`` in ``root``."""
    out = {}
    for pkg in packages:
        for f in sorted((root / pkg).rglob("*.py")):
            parts = f.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = f
    return out


def _children(package: str, modules: Iterable[str]) -> list[str]:
    return sorted(m for m in modules if m.rpartition(".")[0] == package)


def _defines(tree: ast.Module, attr: str) -> bool:
    """``attr`` is bound at the top level of a module (assigned, defined or imported)."""
    for node in tree.body:
        names = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [(a.asname or a.name).split(".")[0] for a in node.names]
        if attr in names:
            return True
    return False


def _strings(node: ast.AST | None, consts: dict[str, tuple[str, ...]]) -> tuple[str, ...]:
    """The strings of a literal string / tuple / list, or of a module-level name bound to one."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return (node.value,)
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(s for e in node.elts for s in _strings(e, consts))
    if isinstance(node, ast.Name):
        return consts.get(node.id, ())
    return ()


class _Scan:
    """The hidden links of one module (:func:`hidden_edges`)."""

    def __init__(self, name: str, where: str, trees: dict[str, ast.Module],
                 groups: dict[str, list[str]], tables: dict[str, list[str]]):
        self.name, self.where, self.trees, self.groups = name, where, trees, groups
        self.tables = tables
        self.tree = trees[name]
        self.edges: list[Edge] = []
        self.consts = {t.id: _strings(n.value, {}) for n in self.tree.body
                       if isinstance(n, ast.Assign) for t in n.targets
                       if isinstance(t, ast.Name) and _strings(n.value, {})}
        for node in ast.walk(self.tree):
            for child in ast.iter_child_nodes(node):
                child.parent = node  # type: ignore[attr-defined]

    def add(self, target: str, node: ast.AST, how: str) -> None:
        if target in self.trees and target != self.name:
            self.edges.append(Edge(self.name, target, f"{self.where}:{node.lineno}", how))

    def run(self) -> list[Edge]:
        docstrings = {id(n.body[0].value) for n in ast.walk(self.tree)
                      if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                        ast.AsyncFunctionDef))
                      and n.body and isinstance(n.body[0], ast.Expr)
                      and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call):
                self.call(node)
            elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and id(node) not in docstrings):
                module = node.value.partition(":")[0]
                if "." in module or ":" in node.value:
                    self.add(module, node, "module path in a string")
        return self.edges

    def call(self, node: ast.Call) -> None:
        f = node.func
        fname = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
        first = node.args[0] if node.args else None
        if fname in IMPORTERS and first is not None:
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                self.add(first.value, node, "importlib")
            elif isinstance(first, ast.JoinedStr):
                self.dynamic(node, first)
        elif fname in READERS and first is not None:
            for section in _strings(first, self.consts):
                for target in self.tables.get(section, []):
                    self.add(target, node, f"registry table [{section}]")
        elif fname == "entry_points":
            for k in node.keywords:
                for group in (_strings(k.value, self.consts) if k.arg == "group" else ()):
                    for target in self.groups.get(group, []):
                        self.add(target, node, f"entry point {group}")

    def is_package(self, module: str) -> bool:
        return any(m.startswith(module + ".") for m in self.trees)

    def dynamic(self, node: ast.Call, fstring: ast.JoinedStr) -> None:
        """``import_module(f"pkg.{name}")``: the modules of ``pkg`` it can reach."""
        head = fstring.values[0] if fstring.values else None
        if not (isinstance(head, ast.Constant) and str(head.value).endswith(".")):
            return
        package = head.value[:-1]
        parent = node.parent  # type: ignore[attr-defined]
        attr = parent.attr if isinstance(parent, ast.Attribute) else None
        if isinstance(parent, ast.Call) and getattr(parent.func, "id", None) == "getattr" \
                and len(parent.args) > 1 and isinstance(parent.args[1], ast.Constant):
            attr = parent.args[1].value
        scope = node
        while not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
            scope = scope.parent  # type: ignore[attr-defined]
        skip = {s for n in ast.walk(scope) if isinstance(n, ast.Compare)
                and any(isinstance(o, ast.NotIn) for o in n.ops)
                for c in n.comparators for s in _strings(c, self.consts)}
        text = ast.unparse(scope)
        for m in _children(package, self.trees):
            leaf = m.rpartition(".")[2]
            if leaf in skip or ("ispkg" in text and self.is_package(m)) \
                    or ("startswith('_')" in text and leaf.startswith("_")):
                continue
            if attr is None or _defines(self.trees[m], attr):
                self.add(m, node, "importlib, a name built at run time")


def entry_point_groups(pyproject: Path) -> dict[str, list[str]]:
    """``[project.entry-points."GROUP"]`` -> the modules its entries name."""
    doc = tomllib.loads(pyproject.read_text())
    groups = doc.get("project", {}).get("entry-points", {})
    return {g: [v.partition(":")[0].strip() for v in entries.values()]
            for g, entries in groups.items()}


def registry_tables(path: Path) -> dict[str, list[str]]:
    """seqprobe/registry.toml's tables -> the modules each names (``"module:attr"`` rows)."""
    doc = tomllib.loads(path.read_text()) if path.is_file() else {}
    return {section: [v.partition(":")[0].strip() for v in rows.values() if isinstance(v, str)]
            for section, rows in doc.items() if isinstance(rows, dict)}


def hidden_edges(root: Path = ROOT, packages: Iterable[str] = PACKAGES,
                 pyproject: Path | None = None) -> list[Edge]:
    """The links between suite modules that no ``import`` statement states."""
    files = module_files(root, packages)
    trees = {m: ast.parse(f.read_text(), str(f)) for m, f in files.items()}
    pyproject = root / "pyproject.toml" if pyproject is None else pyproject
    groups = entry_point_groups(pyproject) if pyproject.is_file() else {}
    tables = registry_tables(root / REGISTRY)
    out: list[Edge] = []
    for m, f in files.items():
        out += _Scan(m, str(f.relative_to(root)), trees, groups, tables).run()
    return out


def statement_edges(graph: grimp.ImportGraph, root: Path = ROOT) -> list[Edge]:
    """grimp's edges (every ``import`` statement, in a function or not), with file:line."""
    out = []
    for m in sorted(graph.modules):
        for t in sorted(graph.find_modules_directly_imported_by(m)):
            details = graph.get_import_details(importer=m, imported=t)
            line = details[0]["line_number"] if details else "?"
            path = m.replace(".", "/")
            where = f"{path}/__init__.py" if (root / path).is_dir() else f"{path}.py"
            out.append(Edge(m, t, f"{where}:{line}", "import"))
    return out


def all_edges(root: Path = ROOT, packages: Iterable[str] = PACKAGES,
              pyproject: Path | None = None) -> list[Edge]:
    """Import statements and hidden links together."""
    graph = grimp.build_graph(*packages, cache_dir=None)
    return statement_edges(graph, root) + hidden_edges(root, packages, pyproject)


def upward(edges: Iterable[Edge]) -> list[Edge]:
    """The links from a lower layer to a higher one (:data:`RANK`)."""
    rank = lambda m: RANK.get(m.split(".")[0], -1)  # noqa: E731
    return [e for e in edges if rank(e.importer) < rank(e.imported)]


def run_graph(edges: Iterable[Edge], modules: Iterable[str]) -> dict[str, dict[str, Edge]]:
    """What importing each module runs: ``{module: {runs: the edge that makes it}}``. A link
    to ``a.b.c`` runs ``a`` and ``a.b`` too, except the packages above the importer itself
    (they are running already when it is imported)."""
    modules = set(modules)
    out: dict[str, dict[str, Edge]] = {m: {} for m in modules}
    for e in edges:
        parts = e.imported.split(".")
        for t in (".".join(parts[:i]) for i in range(1, len(parts) + 1)):
            if t in modules and t != e.importer and not (e.importer + ".").startswith(t + "."):
                out.setdefault(e.importer, {}).setdefault(t, e)
    return out


def cycles(graph: dict[str, dict[str, Edge]]) -> list[list[str]]:
    """Strongly connected components of more than one module (networkx), each sorted."""
    g = nx.DiGraph()
    g.add_nodes_from(graph)
    g.add_edges_from((a, b) for a, targets in graph.items() for b in targets)
    return sorted(sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1)


def cycle_edges(graph: dict[str, dict[str, Edge]], component: list[str]) -> list[Edge]:
    """The links inside one cycle, for a failure message that says where each was found."""
    inside = set(component)
    return [e for m in component for t, e in sorted(graph.get(m, {}).items()) if t in inside]
