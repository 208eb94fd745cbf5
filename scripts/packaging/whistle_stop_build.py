"""The build backend: setuptools, with the packages found from the folders (no hand-kept list).

The source tree keeps its top level (backends/, gui/, resources/), while the installed package is
`whistle_stop`: each folder is mapped to `whistle_stop.<folder>` and every folder below it is a
subpackage (resources' data folders are namespace packages), so a new folder is installed without
editing a list. pyproject.toml names this module as its build backend (`backend-path`); `pip install
-e .` (what `make` runs) gives the editable install whose finder maps the three names to the checkout.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import build_meta, find_namespace_packages, setup
from setuptools.command.sdist import sdist

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "whistle_stop"
FOLDERS = ("backends", "gui", "resources")


def package_dirs() -> dict[str, str]:
    return {f"{PACKAGE}.{folder}": folder for folder in FOLDERS}


def packages() -> list[str]:
    """Every folder under the three, as a dotted name under `whistle_stop` (caches left out)."""
    found = []
    for folder in FOLDERS:
        below = find_namespace_packages(str(ROOT / folder), exclude=["*__pycache__*"])
        found += [f"{PACKAGE}.{folder}", *(f"{PACKAGE}.{folder}.{name}" for name in below)]
    return found


class _SdistWithBackend(sdist):
    """An sdist carries this module too: a wheel is built from the sdist with the same backend."""

    def make_distribution(self) -> None:
        self.filelist.append(Path(__file__).relative_to(ROOT).as_posix())
        super().make_distribution()


class _Backend(build_meta._BuildMetaBackend):
    """setuptools' own backend; only the setup() call gets the packages found above."""

    def run_setup(self, setup_script: str = "setup.py") -> None:
        setup(packages=packages(), package_dir=package_dirs(), cmdclass={"sdist": _SdistWithBackend})


_backend = _Backend()
get_requires_for_build_wheel = _backend.get_requires_for_build_wheel
get_requires_for_build_sdist = _backend.get_requires_for_build_sdist
get_requires_for_build_editable = _backend.get_requires_for_build_editable
prepare_metadata_for_build_wheel = _backend.prepare_metadata_for_build_wheel
prepare_metadata_for_build_editable = _backend.prepare_metadata_for_build_editable
build_wheel = _backend.build_wheel
build_sdist = _backend.build_sdist
build_editable = _backend.build_editable
