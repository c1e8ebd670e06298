"""The architecture holds: layers only point down, nothing imports in a circle, and every
module imports on its own (no import-order dependence). The layer and cycle checks read the
graph as it runs (:mod:`tests.import_graph`): import statements plus the links ``lint-imports``
cannot see (importlib, tables of module paths, the registry's tables, entry points)."""

from tests import ROOT_DIR
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import grimp
import networkx as nx
import pytest

from tests import import_graph as ig

ROOT = ROOT_DIR
PACKAGES = ("seqprobe", "tasks", "models", "probes", "analyses", "figures", "bench")


def test_the_import_linter_contracts_hold():
    """`.importlinter`: tasks <- models <- probes <- analyses, figures and bench beside them;
    no analysis imports another."""
    r = subprocess.run(["lint-imports", "--config", str(ROOT / ".importlinter"), "--no-cache"],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]


def _imports(graph: grimp.ImportGraph, module: str) -> list[str]:
    """What importing ``module`` runs: the modules it imports and, for each, the package
    ``__init__``s above it (``import a.b.c`` runs ``a`` and ``a.b`` first) — except the
    packages above ``module`` itself, which are running already when it is imported."""
    out = set()
    for m in graph.find_modules_directly_imported_by(module):
        parts = m.split(".")
        out.add(m)
        out.update(a for a in (".".join(parts[:i]) for i in range(1, len(parts)))
                   if a in graph.modules and not (module + ".").startswith(a + "."))
    out.discard(module)
    return sorted(out)


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (networkx), over what importing
    each module runs (:func:`_imports`: package ``__init__``s included)."""
    g = nx.DiGraph()
    g.add_nodes_from(graph.modules)
    g.add_edges_from((m, t) for m in graph.modules for t in _imports(graph, m))
    return sorted(sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1)


def test_no_module_imports_itself_in_a_circle():
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    assert _cycles(graph) == []


def _all_modules() -> list[str]:
    names = []
    for pkg in PACKAGES:
        mod = importlib.import_module(pkg)
        names.append(pkg)
        names += [m.name for m in pkgutil.walk_packages(mod.__path__, f"{pkg}.")
                  if not m.name.endswith("__main__")]
    return names


# Runs in a fresh interpreter. A first forked child imports every suite module and reports which
# other modules that loaded; the parent imports those (the third-party libraries and their
# submodules, in the order they were loaded), so that each suite module, imported next in a
# forked child that has none of the suite's modules loaded, pays only for its own code.
IMPORT_ALONE = """
import importlib, os, sys
OURS = set(sys.argv[1].split(","))
modules = sys.argv[2:]
read, write = os.pipe()
pid = os.fork()
if pid == 0:  # the survey: everything the suite's modules pull in
    os.close(read)
    before = set(sys.modules)
    for module in modules:
        try:
            __import__(module)
        except BaseException:
            pass  # reported by its own child below
    loaded = [m for m in sys.modules if m not in before and m.split(".")[0] not in OURS
              and not m.startswith("__")]
    os.write(write, "\\n".join(loaded).encode())
    os._exit(0)
os.close(write)
chunks = []
while chunk := os.read(read, 1 << 16):
    chunks.append(chunk)
os.close(read)
os.waitpid(pid, 0)
for name in b"".join(chunks).decode().split():
    try:
        importlib.import_module(name)
    except BaseException:
        pass  # a module that imports only as part of its package's own import

bad = []
running = {}  # pid -> (module, read end of its pipe)

def reap():
    pid, status = os.wait()
    module, read = running.pop(pid)
    message = os.read(read, 1000).decode()
    os.close(read)
    if status:
        bad.append(message or f"{module}: exit status {status}")

for module in modules:
    if len(running) >= (os.cpu_count() or 1):  # one child per core at a time
        reap()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            __import__(module)
            code = 0
        except BaseException as e:
            os.write(write, f"{module}: {type(e).__name__}: {e}".encode()[:500])
            code = 1
        os._exit(code)
    os.close(write)
    running[pid] = (module, read)
while running:
    reap()
print("\\n".join(sorted(bad)))
"""


def test_every_module_imports_alone():
    """Each module imported first, in a process where no other suite module was imported: an
    import that only works after another module was imported fails here."""
    modules = _all_modules()
    assert "analyses.reproduce" in modules and "models.train.loop" in modules
    r = subprocess.run([sys.executable, "-c", IMPORT_ALONE, ",".join(PACKAGES), *modules],
                       cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == ""


def test_the_import_alone_check_can_fail(tmp_path):
    (tmp_path / "needs_order.py").write_text("import sys\nsys.modules['other'].x\n")
    r = subprocess.run([sys.executable, "-c", IMPORT_ALONE, "needs_order", "needs_order"],
                       cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert "needs_order: KeyError" in r.stdout


def test_the_cycle_finder_finds_a_cycle(tmp_path, monkeypatch):
    """The check above can fail: two modules that import each other are reported."""
    pkg = tmp_path / "loopy"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from loopy import b\n")
    (pkg / "b.py").write_text("from loopy import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _cycles(grimp.build_graph("loopy", cache_dir=None)) == [["loopy.a", "loopy.b"]]


def test_the_cycle_finder_sees_a_cycle_through_a_package_init(tmp_path, monkeypatch):
    """``common`` imports ``plan.costs``, which runs ``plan/__init__``, which imports
    ``plan.cli``, which imports ``common``: no two modules name each other, yet importing
    ``common`` first fails on a partly initialised module."""
    pkg = tmp_path / "loopy2"
    (pkg / "plan").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "common.py").write_text("from loopy2.plan.costs import x\n")
    (pkg / "plan" / "__init__.py").write_text("from loopy2.plan.cli import main\n")
    (pkg / "plan" / "cli.py").write_text("from loopy2.common import x\nmain = 1\n")
    (pkg / "plan" / "costs.py").write_text("x = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _cycles(grimp.build_graph("loopy2", cache_dir=None)) == [
        ["loopy2.common", "loopy2.plan", "loopy2.plan.cli"]]


@pytest.mark.parametrize("pkg", PACKAGES)
def test_packages_import(pkg):
    importlib.import_module(pkg)


# ------------------------------------------------------------------ links the linter cannot see
# The registries import the modules their table in seqprobe/registry.toml names, on use. Those
# modules import only what sits below the registry (tasks.base; the checkpoint writer and
# models.tokenizer, not the checkpoint reader or models.hf), so no link closes a circle.


@pytest.fixture(scope="module")
def suite_edges() -> list[ig.Edge]:
    return ig.all_edges()


def _cycle_report(graph, comps) -> str:
    return "\n".join(f"cycle {' <-> '.join(c)}:\n  " + "\n  ".join(
        map(str, ig.cycle_edges(graph, c))) for c in comps)


def test_no_link_points_up_counting_importlib_tables_and_entry_points(suite_edges):
    """seqprobe <- tasks <- models <- probes <- analyses <- bench, on every link."""
    up = ig.upward(suite_edges)
    assert not up, "links up the layers:\n" + "\n".join(map(str, up))


def test_no_cycle_counting_hidden_links(suite_edges):
    """No module reaches itself through import statements (in a function or not), package
    ``__init__``s, importlib, module-path tables, the registry's tables or entry points."""
    graph = ig.run_graph(suite_edges, grimp.build_graph(*PACKAGES, cache_dir=None).modules)
    comps = ig.cycles(graph)
    assert not comps, _cycle_report(graph, comps)


def test_the_registries_are_in_the_graph_they_are_checked_in(suite_edges):
    """The cycle check above sees the registry's tables: each reader links to the modules its
    table names (a checker that lost them would pass on any registry cycle)."""
    found = {(e.importer, e.imported) for e in suite_edges if e.how.startswith("registry")}
    assert ("tasks.registry", "tasks.copy") in found
    assert ("models.registry", "models.transformer") in found
    assert ("models.registry", "models.ssm.mamba") in found
    assert ("analyses.zoo.recipes", "analyses.zoo.copy") in found
    assert ("analyses.reproduce.plan", "analyses.mamba_decay") in found


def _crafted(tmp_path, monkeypatch, files: dict[str, str], pyproject: str = "") -> list:
    """A two-layer suite (``low`` below ``high``) in ``tmp_path``: its links, hidden included."""
    for rel, text in files.items():
        f = tmp_path / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    (tmp_path / "pyproject.toml").write_text(pyproject)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(ig, "RANK", {"low": 0, "high": 1})
    return ig.all_edges(tmp_path, ("low", "high"), tmp_path / "pyproject.toml")


def test_the_checker_sees_each_kind_of_hidden_upward_link(tmp_path, monkeypatch):
    """Each way a module can reach up without an import statement is named, with file:line."""
    edges = _crafted(tmp_path, monkeypatch, {
        "low/__init__.py": "",
        "low/lazy.py": "import importlib\nf = lambda: importlib.import_module('high.a')\n",
        "low/table.py": "PATHS = {'x': 'high.b:Thing'}\n",
        "low/built.py": "import importlib\n\n\ndef get(n):\n"
                        "    return importlib.import_module(f'high.{n}').FIGURE\n",
        "low/plugins.py": "import importlib.metadata\nGROUP = 'suite.plugins'\n\n\n"
                          "def found():\n    return importlib.metadata.entry_points(group=GROUP)\n",
        "low/fine.py": '"""Reads high.a in prose only."""\n',
        "high/__init__.py": "",
        "high/a.py": "", "high/b.py": "Thing = 1\n", "high/c.py": "FIGURE = 1\n",
        "high/d.py": "", "high/e.py": "import low.fine\n",
    }, pyproject='[project.entry-points."suite.plugins"]\np = "high.d:hook"\n')
    up = {(e.importer, e.imported, e.where) for e in ig.upward(edges)}
    assert up == {("low.lazy", "high.a", "low/lazy.py:2"),
                  ("low.table", "high.b", "low/table.py:1"),
                  ("low.built", "high.c", "low/built.py:5"),  # the one that defines FIGURE
                  ("low.plugins", "high.d", "low/plugins.py:6")}


def test_the_checker_sees_a_cycle_hidden_in_a_registry_table(tmp_path, monkeypatch):
    """``reg`` reads a table of seqprobe/registry.toml (as :mod:`seqprobe.registry` does)
    naming a module that imports ``reg`` for its base class: no import statement closes the
    circle; a module the table does not name is not linked."""
    (tmp_path / "seqprobe").mkdir()
    (tmp_path / "seqprobe" / "registry.toml").write_text(
        '[tasks]\none = "low.one:One"\n[archs]\nhigh = "high.a:A"\n')
    edges = _crafted(tmp_path, monkeypatch, {
        "low/__init__.py": "",
        "low/reg.py": "from seqprobe.registry import Registered\n"
                      "T = Registered('tasks')\n"
                      "class Base:\n    pass\n",
        "low/one.py": "from low.reg import Base\n",
        "low/util.py": "from low.reg import Base\n",
        "low/up.py": "from seqprobe.registry import table\nA = table('archs')\n",
        "high/__init__.py": "", "high/a.py": "",
    })
    graph = ig.run_graph(edges, {e.importer for e in edges} | {e.imported for e in edges})
    assert ig.cycles(graph) == [["low.one", "low.reg"]]  # util is named nowhere
    found = {str(e) for e in ig.cycle_edges(graph, ["low.one", "low.reg"])}
    assert "low.reg -> low.one (registry table [tasks], low/reg.py:2)" in found
    up = {(e.importer, e.imported) for e in ig.upward(edges)}
    assert up == {("low.up", "high.a")}  # a table read below the layer it names
