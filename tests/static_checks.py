"""The static checks of the test command: the layer contract (import-linter), the package's
face, and the type checker (mypy).

botweave is one import package assembled from several folders (bots/ is `botweave`,
adapters/ is `botweave.adapters`, ...). Both tools read files rather than asking Python's
import system, so they are shown the package as it is installed: a tree of links under
build/static/ mirroring the package-dir map in pyproject.toml.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MIRROR = ROOT / "build" / "static"


def build_mirror() -> Path:
    """Link every mapped folder into place: `botweave/` holds bots/'s files and a link per
    feature folder, so walking the mirror walks exactly the installed package."""
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    if MIRROR.exists():
        shutil.rmtree(MIRROR)
    package = MIRROR / "botweave"
    package.mkdir(parents=True)
    for entry in (ROOT / mapping["botweave"]).iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for name, folder in mapping.items():
        if name != "botweave":
            (MIRROR / name.replace(".", "/")).symlink_to(ROOT / folder, target_is_directory=True)
    return MIRROR


def lint_imports() -> str:
    """import-linter's command, installed next to this interpreter."""
    found = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    if found is None:
        raise SystemExit("lint-imports is not installed: pip install -e '.[dev]'")
    return found


def kernel_modules() -> set[str]:
    """The kernel's modules, as the layer contract's bottom layer names them."""
    contract = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"][0]
    return {name.strip() for name in contract["layers"][-1].split(":")}


def _eager_imports(body: list[ast.stmt]) -> list[tuple[int, str]]:
    """The modules imported while a module body runs: not in function bodies (they run when
    called) and not under `if TYPE_CHECKING:` (read by type checkers only)."""
    found: list[tuple[int, str]] = []
    for node in body:
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.If):
            if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                found += _eager_imports(node.body)
            found += _eager_imports(node.orelse)
        elif isinstance(node, ast.Try):
            for part in (node.body, *(handler.body for handler in node.handlers), node.orelse, node.finalbody):
                found += _eager_imports(part)
        elif isinstance(node, (ast.With, ast.ClassDef)):
            found += _eager_imports(node.body)
    return found


def face_problems() -> list[str]:
    """The package's face (`botweave/__init__.py`) belongs to the kernel: importing it must
    load the kernel only. The names it hands on from the layers above come through its module
    `__getattr__`, on first use. import-linter cannot tell the two apart (it sees every import
    statement, wherever it stands, and none that importlib makes), so this check reads the
    file: every botweave module imported while it runs must be a kernel module."""
    face = ROOT / "bots" / "__init__.py"
    kernel = kernel_modules()
    problems = []
    for line, module in _eager_imports(ast.parse(face.read_text()).body):
        parts = module.split(".")
        if parts[0] == "botweave" and (len(parts) < 2 or parts[1] not in kernel):
            problems.append(f"bots/__init__.py:{line}: imports {module} when botweave is imported; "
                            "hand its names on through __getattr__ instead")
    return problems


def main() -> int:
    problems = face_problems()
    print("+ the package's face imports the kernel only:", "KEPT" if not problems else "BROKEN", flush=True)
    for problem in problems:
        print(f"  {problem}")
    mirror = build_mirror()
    env = {**os.environ, "PYTHONPATH": str(mirror), "MYPYPATH": str(mirror)}
    checks = [
        [lint_imports(), str(ROOT / "pyproject.toml")],
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "-p", "botweave"],
    ]
    status = 1 if problems else 0
    for command in checks:
        print("+", " ".join(Path(part).name if part.startswith("/") else part for part in command), flush=True)
        status |= subprocess.run(command, cwd=mirror, env=env).returncode
    return status


if __name__ == "__main__":
    sys.exit(main())
