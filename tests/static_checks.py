"""The static checks of the test command: the layer contract (import-linter) and the type
checker (mypy).

botweave is one import package assembled from several folders (bots/ is `botweave`,
adapters/ is `botweave.adapters`, ...). Both tools read files rather than asking Python's
import system, so they are shown the package as it is installed: a tree of links under
build/static/ mirroring the package-dir map in pyproject.toml.
"""

from __future__ import annotations

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


def main() -> int:
    mirror = build_mirror()
    env = {**os.environ, "PYTHONPATH": str(mirror), "MYPYPATH": str(mirror)}
    checks = [
        [lint_imports(), str(ROOT / "pyproject.toml")],
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "-p", "botweave"],
    ]
    status = 0
    for command in checks:
        print("+", " ".join(Path(part).name if part.startswith("/") else part for part in command), flush=True)
        status |= subprocess.run(command, cwd=mirror, env=env).returncode
    return status


if __name__ == "__main__":
    sys.exit(main())
