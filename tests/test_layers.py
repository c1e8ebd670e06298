"""The architecture holds: layers only point down, nothing imports in a circle, and every
module imports on its own (no import-order dependence)."""

import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("tasks", "models", "probes", "analyses", "figures", "bench")


def test_the_import_linter_contracts_hold():
    """`.importlinter`: tasks <- models <- probes <- analyses, figures and bench beside them;
    no analysis imports another."""
    r = subprocess.run(["lint-imports", "--config", str(ROOT / ".importlinter"), "--no-cache"],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    modules = sorted(graph.modules)

    def visit(root):
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph.find_modules_directly_imported_by(nxt)))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))

    for m in modules:
        if m not in index:
            visit(m)
    return out


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


def test_every_module_imports_alone():
    """Each module in a fresh interpreter: an import that only works after another module was
    imported first fails here."""
    code = ("import importlib, sys\nbad = []\nfor m in sys.argv[1:]:\n"
            "    import subprocess\n"
            "    r = subprocess.run([sys.executable, '-c', f'import {m}'], capture_output=True,"
            " text=True)\n"
            "    if r.returncode: bad.append(m + ': ' + r.stderr.strip().splitlines()[-1])\n"
            "print('\\n'.join(bad))")
    r = subprocess.run([sys.executable, "-c", code, *_all_modules()], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert r.stdout.strip() == "", r.stdout


def test_the_cycle_finder_finds_a_cycle(tmp_path, monkeypatch):
    """The check above can fail: two modules that import each other are reported."""
    pkg = tmp_path / "loopy"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from loopy import b\n")
    (pkg / "b.py").write_text("from loopy import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _cycles(grimp.build_graph("loopy", cache_dir=None)) == [["loopy.a", "loopy.b"]]


@pytest.mark.parametrize("pkg", PACKAGES)
def test_packages_import(pkg):
    importlib.import_module(pkg)
