"""The import contract: every package imports only what the architecture lets it.

    s3api -> blobstore -> (wire, runtime) <- bookie

Inside `blobstore/`, the packages stand in layers (docs/architecture.md): the two leaves
(`wire`, `runtime`) import nothing else of the product; the ledger client and the
catalog sit on them; recovery on the ledger client; the object layer on all three; the
admin commands and the command line on top. `bookie/` imports only the two leaves, and
nothing imports `s3api/`. Every import counts, also one inside a function or under
TYPE_CHECKING. The command line reaches the bookie and the gateway by module name
(`importlib`), so that neither is an arrow of `blobstore/`.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("bookie", "blobstore", "s3api")

WIRE = "blobstore.wire"
RUNTIME = "blobstore.runtime"
LEDGER = "blobstore.ledger"
CATALOG = "blobstore.catalog"
RECOVERY = "blobstore.recovery"
OBJECTS = "blobstore.objects"
MAINTENANCE = "blobstore.maintenance"
ACCESS = "blobstore.access"
ADMIN = "blobstore.admin"
CLI = "blobstore.cli"
TIER = "blobstore.tier"
KMS = "blobstore.kms"

# What each package may import besides itself (third-party libraries are free).
ALLOWED: dict[str, set[str]] = {
    WIRE: set(),
    RUNTIME: set(),
    LEDGER: {WIRE, RUNTIME},
    CATALOG: {RUNTIME},
    RECOVERY: {LEDGER, WIRE, RUNTIME},
    OBJECTS: {CATALOG, KMS, LEDGER, RECOVERY, TIER, WIRE, RUNTIME},
    MAINTENANCE: {CATALOG, KMS, LEDGER, OBJECTS, RECOVERY, TIER, WIRE, RUNTIME},
    ACCESS: {CATALOG, RUNTIME},
    TIER: {RUNTIME},
    KMS: {RUNTIME},
    ADMIN: {ACCESS, CATALOG, KMS, LEDGER, MAINTENANCE, OBJECTS, RECOVERY, TIER, WIRE, RUNTIME},
    CLI: {
        ACCESS,
        ADMIN,
        CATALOG,
        KMS,
        LEDGER,
        MAINTENANCE,
        OBJECTS,
        RECOVERY,
        TIER,
        WIRE,
        RUNTIME,
    },
    "bookie": {WIRE, RUNTIME},
    "s3api": {ACCESS, CATALOG, KMS, LEDGER, OBJECTS, TIER, RUNTIME},
}


def package_of(module: str) -> str:
    """The contract's unit a dotted module name belongs to ('' when outside the product)."""
    parts = module.split(".")
    if parts[0] not in PRODUCT:
        return ""
    if parts[0] == "blobstore":
        return ".".join(parts[:2]) if len(parts) > 1 else "blobstore"
    return parts[0]


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import in a file, wherever it stands."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: relative import"
            assert node.module is not None
            if node.module in PRODUCT:  # `from blobstore import ledger` names a package
                found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, node.module))
    return found


def product_files() -> list[Path]:
    return sorted(p for package in PRODUCT for p in (ROOT / package).rglob("*.py"))


def test_every_product_module_belongs_to_a_package_of_the_contract() -> None:
    strays = []
    for path in product_files():
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        if package_of(module) not in ALLOWED and path.name != "__init__.py":
            strays.append(str(path.relative_to(ROOT)))
    assert not strays, f"modules outside every package of the contract: {strays}"


def test_imports_follow_the_contract() -> None:
    broken = []
    for path in product_files():
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        source = package_of(module)
        allowed = ALLOWED.get(source, set()) | {source}
        for line, imported in imported_modules(path):
            target = package_of(imported)
            if target and target not in allowed:
                broken.append(
                    f"{path.relative_to(ROOT)}:{line}: imports {imported} "
                    f"({source} may import only {sorted(allowed - {source}) or 'nothing'})"
                )
    assert not broken, "imports against the architecture:\n" + "\n".join(broken)


def test_the_contract_itself_has_no_cycle() -> None:
    graphlib.TopologicalSorter(ALLOWED).prepare()  # raises CycleError on a loop


def test_the_checker_reads_every_kind_of_import(tmp_path: Path) -> None:
    """Imports inside functions and `from PKG import MODULE` are read too."""
    path = tmp_path / "sample.py"
    path.write_text("def f():\n    from blobstore import objects\n    import s3api.app\n")
    found = [(line, package_of(module)) for line, module in imported_modules(path)]
    assert found == [(2, OBJECTS), (3, "s3api")]
    assert OBJECTS not in ALLOWED["bookie"] and "s3api" not in ALLOWED[OBJECTS]


def module_of(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_graph(paths: list[Path], root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the product modules it imports (`from pkg import mod` names `pkg.mod`;
    a package's __init__, which only hands names on, is not a node)."""
    modules = {module_of(path, root): path for path in paths if path.name != "__init__.py"}
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            for name in names:
                while name and name not in modules:
                    name = name.rpartition(".")[0]  # `pkg.mod.Name` -> `pkg.mod`
                if name and name != module:
                    targets.add(name)
        graph[module] = targets
    return graph


def cycle_in(graph: dict[str, set[str]]) -> list[str]:
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as e:
        return list(e.args[1])
    return []


def test_no_module_imports_itself_back() -> None:
    """No import cycle between modules either, counting imports under TYPE_CHECKING and
    inside functions: a module that needs its caller's type takes a Protocol instead."""
    cycle = cycle_in(module_graph(product_files()))
    assert not cycle, f"import cycle: {' -> '.join(cycle)}"


def test_the_cycle_check_sees_a_type_only_cycle(tmp_path: Path) -> None:
    package = tmp_path / "blobstore" / "ledger"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from blobstore.ledger import b\n")
    (package / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from blobstore.ledger.a import A\n"
    )
    graph = module_graph(sorted(tmp_path.rglob("*.py")), tmp_path)
    assert graph == {
        "blobstore.ledger.a": {"blobstore.ledger.b"},
        "blobstore.ledger.b": {"blobstore.ledger.a"},
    }
    assert set(cycle_in(graph)) == {"blobstore.ledger.a", "blobstore.ledger.b"}
