"""environment.json's library versions: the core packages and the run's engines' own runtimes."""

import importlib.metadata
import importlib.util
import re

import pytest

from whistle_stop.backends import registry
from whistle_stop.backends.results.environment import CORE_PACKAGES, NOT_INSTALLED, collect_environment


def canonical(distribution: str) -> str:
    """PEP 503's form: what pip treats as the same distribution."""
    return re.sub(r"[-_.]+", "-", distribution).lower()


def installed_version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return NOT_INSTALLED


def test_environment_records_the_runs_engine_packages():
    libraries = collect_environment(settings={"backends": ["tf", "llamacpp"]})["libraries"]
    for name in ("tensorflow-cpu", "tensorflow", "safetensors", "llama-cpp-python", "gguf", *CORE_PACKAGES):
        assert libraries[name] == installed_version(name)


def test_environment_records_only_the_runs_engines_beside_the_core():
    libraries = collect_environment(settings={"backends": ["hf"]})["libraries"]
    assert set(libraries) == set(CORE_PACKAGES)  # hf's torch and transformers are core ones
    assert set(collect_environment()["libraries"]) == set(CORE_PACKAGES)


@pytest.mark.parametrize("name", registry.names())
def test_every_importable_requirement_has_its_distribution_declared(name):
    spec = registry.get(name)
    assert bool(spec.packages) == bool(spec.requires)
    declared = {canonical(p) for p in spec.packages}
    providers = importlib.metadata.packages_distributions()
    for module in spec.requires:
        if importlib.util.find_spec(module) is None:
            continue
        shipped_by = {canonical(d) for d in providers.get(module, [])}
        assert shipped_by and shipped_by <= declared, f"{name}: {module} comes from {shipped_by}, not in {declared}"
