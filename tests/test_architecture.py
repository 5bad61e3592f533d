"""The package's shape: no import circles, no import running back up the workflow, no module far
over 500 lines, and every third-party import declared as a dependency in pyproject.toml.

Floors follow the workflow: shared pieces (errors, io, text, stats, config, retrieval, llm, ...)
at the bottom, then the stage families in the order their rules run, then what the Snakefile and
the command line run on top. A module may import its own floor and those below.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "workflow" / "splits"
FLOORS = [
    {"": 0, "config": 0, "retrieval": 0, "llm": 0},
    {"ingest": 1},
    {"graph": 2},
    {"demographics": 3},
    {"topics": 4},
    {"release_data": 5},
    {"sampling": 6},
    {"evaluation": 7},
    {"probes": 8},
    {"hypotheses": 9},
    {"report": 10, "sandbox": 10},
    {"pipeline": 11, "testing": 11, "cli": 11, "api": 11},
]
FLOOR = {name: floor for level in FLOORS for name, floor in level.items()}
MAX_LINES = 600  # "no module far over 500 lines"


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules ``name`` imports, at any depth of its code (imports inside
    functions count: they close circles just the same)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")[: -node.level + (path.name == "__init__.py")]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            targets = [module] + [f"{module}.{alias.name}" for alias in node.names]
        for target in targets:
            parts = target.split(".")
            for end in range(len(parts), 0, -1):
                candidate = ".".join(parts[:end])
                if candidate in known:
                    if candidate not in (name, "splits"):
                        found.add(candidate)
                    break
    return found


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports_of(name, path, set(mods)) for name, path in mods.items()}


def floor_of(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:
        return 0
    family = parts[1] if (PACKAGE / parts[1]).is_dir() else ("cli" if parts[1] == "cli" else "")
    return FLOOR[family]


def test_every_package_folder_has_a_floor():
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders <= set(FLOOR), f"folders without a floor: {sorted(folders - set(FLOOR))}"


def test_no_import_circles():
    graph = import_graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    sys.setrecursionlimit(10_000)

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    assert not circles, f"import circles: {circles}"


def test_no_import_runs_back_up_the_workflow():
    upward = [
        f"{module} -> {imported}"
        for module, imported_set in import_graph().items()
        for imported in imported_set
        if floor_of(imported) > floor_of(module)
    ]
    assert not upward, f"imports from a later stage: {sorted(upward)}"


def test_no_module_far_over_500_lines():
    long = {
        str(path.relative_to(PACKAGE)): n
        for path in PACKAGE.rglob("*.py")
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def _distributions(specs: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[; ]", s, maxsplit=1)[0].lower().replace("_", "-") for s in specs}


def _imports(tree: ast.AST, top_level: bool) -> list[str]:
    """First names of the imports at a module's top level, or of those inside its functions."""
    nodes = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and top_level:
            continue
        nodes.append(node)
    if top_level:  # ast.walk enters functions; keep only the nodes outside every function
        inside = {
            id(n)
            for f in ast.walk(tree)
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
            for n in ast.walk(f)
        }
        nodes = [n for n in nodes if id(n) not in inside]
    else:
        nodes = [
            n
            for f in ast.walk(tree)
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
            for n in ast.walk(f)
        ]
    tops = []
    for node in nodes:
        if isinstance(node, ast.Import):
            tops += [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            tops.append(node.module.split(".")[0])
    return tops


def test_every_third_party_import_is_a_declared_dependency():
    """A module-level import must be a core dependency (every command imports it); an import
    inside a function (an optional engine, an extra's feature) must be declared by some extra.
    ``splits.testing`` builds the tests' tiny models: the test extras may serve it."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    core = _distributions(project["dependencies"])
    extras = _distributions(
        [s for specs in project["optional-dependencies"].values() for s in specs]
    )
    providers = importlib.metadata.packages_distributions()
    undeclared = set()
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        testing = path.parent.name == "testing"
        for top_level in (True, False):
            allowed = core | extras if (testing or not top_level) else core
            for top in _imports(tree, top_level):
                if top == "splits" or top in sys.stdlib_module_names:
                    continue
                dists = {d.lower().replace("_", "-") for d in providers.get(top, [top])}
                if not dists & allowed:
                    where = "module level" if top_level else "in a function"
                    undeclared.add(f"{top} ({path.relative_to(PACKAGE)}, {where})")
    assert not undeclared, f"imports no dependency declares: {sorted(undeclared)}"


def test_rule_files_bind_each_imported_name_once():
    """The Snakefile and its rule files share one namespace: a second import of a name (two
    stages' ``SampleSettings``) silently replaces the first, and a rule would pass another stage's
    settings."""
    bound: dict[str, str] = {}
    twice = []
    files = [REPO / "Snakefile", *sorted((REPO / "workflow" / "rules").glob("*.smk"))]
    for path in files:
        text = path.read_text(encoding="utf-8")
        for match in re.finditer(r"^from ([\w.]+) import (\([^)]*\)|[^\n]+)", text, re.M):
            names = match.group(2).strip("()").replace("\n", " ")
            for name in (n.strip() for n in names.split(",") if n.strip()):
                original, _, alias = name.partition(" as ")
                local = (alias or original).strip()
                source = f"{match.group(1)}.{original.strip()}"
                if local in bound and bound[local] != source:
                    twice.append(f"{local} ({bound[local]}; {source} in {path.name})")
                bound[local] = source
    assert not twice, f"names bound to two objects in the workflow's namespace: {twice}"


def test_every_report_rule_and_only_defined_rules_are_local():
    """The Snakefile's ``localrules`` names rules by hand: a report rule added to report.smk and
    not to the list would become a Slurm job of its own (a queue wait for a table or a plot), and
    a name left behind after a rule's removal would name nothing."""
    snakefile = (REPO / "Snakefile").read_text(encoding="utf-8")
    block = re.search(r"^localrules:\n((?:    \w+,\n)+)", snakefile, re.M)
    assert block, "the Snakefile's localrules block"
    local = set(re.findall(r"\w+", block.group(1)))
    defined, report = set(), set()
    for path in sorted((REPO / "workflow" / "rules").glob("*.smk")):
        names = set(re.findall(r"^\s*(?:rule|checkpoint) (\w+):", path.read_text(), re.M))
        defined |= names
        if path.name == "report.smk":
            report = names
    assert report and report <= local, sorted(report - local)
    assert local <= defined, sorted(local - defined)
