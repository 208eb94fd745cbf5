"""Other Pythons for tests: a virtual environment that sees chosen folders, made in a second.

Tests that need an interpreter with something added (a fake `vllm` package, a bootstrap that blocks
torch) make one here instead of editing the environment of every process: the app's own import
path stays the installed package, as users have it.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path


def site_packages(venv: Path) -> Path:
    return Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))


def python_of(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")


def make_venv(
    venv: Path, folders: tuple[Path, ...] = (), with_this_environment: bool = False, sitecustomize: str = ""
) -> Path:
    """A venv (no pip) whose site-packages also holds `folders`; with `with_this_environment`, the
    packages of the Python running the tests (whistle_stop included, as installed); `sitecustomize`
    runs at every start of its interpreter. Returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = site_packages(venv)
    lines = [str(folder) for folder in folders]
    if with_this_environment:  # addsitedir also runs that site-packages' .pth files (the editable finder)
        lines.append(f"import site; site.addsitedir({sysconfig.get_path('purelib')!r})")
    (site / "tests_extra.pth").write_text("\n".join(lines) + "\n", encoding="utf-8")
    if sitecustomize:
        (site / "sitecustomize.py").write_text(sitecustomize, encoding="utf-8")
    return python_of(venv)
