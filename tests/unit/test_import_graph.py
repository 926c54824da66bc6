"""The packages' imports run one way: no import circle inside models/, training/, export/ or
service/. Every `import` counts, also those inside functions, which is how a circle
usually hides ("import it lazily"). Reads the source with `ast`; imports nothing."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def module_graph(packages: tuple[str, ...]) -> dict[str, set[str]]:
    """module -> the modules of `packages` it imports (module level or inside a function)."""
    files = {}
    for package in packages:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in files.items():
        targets: set[str] = set()
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([node.module] if node.module else [])])
                targets.add(base)
                targets.update(f"{base}.{alias.name}" for alias in node.names)
        graph[name] = {t for t in targets if t in files and t != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_check_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("packages", [("core",), ("models", "core"), ("training", "models", "core"),
                                      ("export", "training", "models", "core"), ("service", "core"),
                                      ("scoring", "service", "core")],
                         ids=["core", "models", "training", "export", "service", "scoring"])
def test_no_import_circle(packages):
    assert circles(module_graph(packages)) == []


ALL_PACKAGES = tuple(sorted(p.parent.name for p in ROOT.glob("*/__init__.py") if p.parent.name != "tests"))


def test_no_import_circle_across_every_package():
    """Every package of the repository at once (a circle through cli/ or bench/ counts too)."""
    assert {"core", "models", "training", "export", "service", "scoring", "cli", "bench"} <= set(ALL_PACKAGES)
    assert circles(module_graph(ALL_PACKAGES)) == []


def imported_roots(package: str) -> set[str]:
    """The top-level names every module of `package` imports (module level or in a function)."""
    roots = set()
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                roots.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level:
                roots.add((node.module or "").split(".")[0])
    return roots


def test_the_benchmarks_import_nothing_from_the_tests():
    """Tests may drive bench's harnesses; bench never leans on a test helper."""
    assert "tests" not in imported_roots("bench")


def test_the_core_points_nowhere_and_imports_nothing_heavy():
    """core/ is what training, export and the service share: it imports none of them, nor
    torch, onnxruntime or a web framework (the serving image and the trainer both carry it)."""
    roots = imported_roots("core")
    assert roots.isdisjoint({"models", "training", "export", "service", "bench", "torch", "onnxruntime",
                             "fastapi", "starlette", "uvicorn"}), roots


WEB_FRAMEWORKS = {"fastapi", "starlette"}


@pytest.mark.parametrize("package", ["core", "service/inference", "scoring"])
def test_no_web_framework_below_the_http_layer(package):
    """The inference layer, the core and `attserve score` import neither FastAPI nor Starlette:
    their errors are plain exceptions (service.inference.errors), rendered by service.http.errors."""
    assert imported_roots(package).isdisjoint(WEB_FRAMEWORKS), imported_roots(package) & WEB_FRAMEWORKS


# imports every module of each package (what `attserve score` and a worker's inference layer load),
# then names the web frameworks that came along
LOADED_FRAMEWORKS = """
import importlib, pkgutil, sys
for name in sys.argv[1:]:
    package = importlib.import_module(name)
    for module in pkgutil.walk_packages(package.__path__, name + "."):
        importlib.import_module(module.name)
print(sorted(m for m in sys.modules if m.split(".")[0] in ("fastapi", "starlette")))
"""


@pytest.mark.parametrize("package", ["core", "service.inference", "scoring"])
def test_importing_below_the_http_layer_loads_no_web_framework(package):
    """The same, as the interpreter sees it: a module's import can pull FastAPI in through
    another package (service.errors did, for every inference module and scoring.files)."""
    done = subprocess.run([sys.executable, "-c", LOADED_FRAMEWORKS, package], cwd=ROOT, capture_output=True,
                          text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout


def test_the_framework_check_sees_fastapi():
    done = subprocess.run([sys.executable, "-c", LOADED_FRAMEWORKS, "service.http"], cwd=ROOT, capture_output=True,
                          text=True, check=True)
    assert "'fastapi'" in done.stdout and "'starlette'" in done.stdout


def test_the_service_imports_neither_torch_nor_the_training_side():
    roots = imported_roots("service")
    assert roots.isdisjoint({"torch", "models", "training", "export", "scoring"}), roots


def test_the_routers_are_imported_at_module_level():
    """create_app used to import its routers inside the function to get around a circle."""
    tree = ast.parse((ROOT / "service" / "http" / "app.py").read_text(encoding="utf-8"))
    create_app = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "create_app")
    inside = [n for n in ast.walk(create_app) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert inside == []


def test_no_test_reaches_into_tools_through_sys_path():
    """tools/ holds probes run by hand; the harnesses the tests share are importable modules
    (bench.harness, bench.servers, tests/ helpers), not files put on sys.path."""
    offenders = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and ast.unparse(node.func) in ("sys.path.insert", "sys.path.append") \
                    and any(name in ast.unparse(node) for name in ("tools", "scripts")):
                offenders.append(path.name)
    assert offenders == []


@pytest.mark.parametrize("package", ["core", "models", "training", "export", "service", "cli", "bench", "tests"])
def test_nothing_imports_the_tools_folder(package):
    """tools/ is run by hand, never imported (the bundle rewrites live in export.rewrite,
    `attserve bundle ...`), nor is a scripts folder."""
    assert imported_roots(package).isdisjoint({"tools", "scripts"})


def test_one_free_port():
    """One way to pick a free local port: bench.servers.free_port."""
    defined = [str(path.relative_to(ROOT)) for package in ("tests", "bench", "service", "tools")
               for path in (ROOT / package).rglob("*.py")
               if any(isinstance(n, ast.FunctionDef) and n.name == "free_port"
                      for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))))]
    assert defined == ["bench/servers.py"]


# service/'s layers (service/__init__.py): the shared modules, then inference, then HTTP over
# it, then the processes over both. `python -m service` (service.__main__) is the entry point:
# it starts the process layer.
SERVICE_LAYERS = ("service.inference", "service.http", "service.process")
SERVICE_SHARED = {"service", "service.settings", "service.settings_doc", "service.metrics", "service.logs",
                  "service.tracing", "service.worker_group"}


def layer_of(module: str) -> str:
    return next((layer for layer in SERVICE_LAYERS if module == layer or module.startswith(layer + ".")), "shared")


def test_every_service_module_has_a_layer():
    """A module at service/'s top is one the layers share (or the entry point); the rest live in a
    sub-package, so a new module says where it belongs."""
    top = {m for m in module_graph(("service",)) if layer_of(m) == "shared"}
    assert top == SERVICE_SHARED | {"service.__main__"}


@pytest.mark.parametrize("layer, forbidden", [
    ("shared", set(SERVICE_LAYERS)),
    ("service.inference", {"service.http", "service.process"}),
    ("service.http", {"service.process"}),
], ids=["shared", "inference", "http"])
def test_the_service_layers_import_one_way(layer, forbidden):
    """The shared modules import no sub-package; service.inference imports nothing from
    service.http (nor service.process); service.http nothing from service.process."""
    graph = module_graph(("service",))
    crossings = sorted(f"{module} -> {target}" for module, targets in graph.items()
                       if module != "service.__main__" and layer_of(module) == layer
                       for target in targets if layer_of(target) in forbidden)
    assert crossings == []


def test_the_layer_check_sees_a_crossing():
    assert layer_of("service.inference.engine") == "service.inference"
    assert layer_of("service.http") == "service.http" and layer_of("service.httpx") == "shared"
    assert layer_of("service.settings") == "shared"


def private_imports(package: str) -> list[str]:
    """`module -> other.module._name` for each underscore name a module of `package` imports from
    another module of the project (module level or inside a function)."""
    found = []
    for path in (ROOT / package.replace(".", "/")).rglob("*.py"):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ("service", "core"):
                found += [f"{module} -> {node.module}.{alias.name}" for alias in node.names
                          if alias.name.startswith("_") and node.module != module]
    return sorted(found)


def test_the_http_modules_import_no_private_name_of_another_module():
    """The HTTP modules share what they export (the dataplane, the schemas' RequestBody and
    valid_text), never another module's underscore names (zero_shot and predict took
    schemas._Body, _form and _valid_text)."""
    assert private_imports("service.http") == []


def test_the_private_import_check_sees_one(tmp_path, monkeypatch):
    package = tmp_path / "service" / "http"
    package.mkdir(parents=True)
    (package / "a.py").write_text("def f():\n    from service.http.schemas import _Body, Text\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert private_imports("service.http") == ["service.http.a -> service.http.schemas._Body"]
