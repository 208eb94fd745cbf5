"""The engines of the newer runtimes' extras: listed everywhere, and when their package is
missing, unavailable with the exact command that installs it (nothing imported to find out)."""

from __future__ import annotations

import importlib.util

import pytest

from whistle_stop.backends import registry

EXTRAS = {
    "tf": ("tensorflow", 'pip install -e ".[tf]"'),
    "tf-xla": ("tensorflow", 'pip install -e ".[tf]"'),
    "ortgenai": ("onnxruntime_genai", 'pip install -e ".[ortgenai]"'),
    "ortgenai-int8": ("onnxruntime_genai", 'pip install -e ".[ortgenai]"'),
    "ortgenai-int4": ("onnxruntime_genai", 'pip install -e ".[ortgenai]"'),
    "openvino-genai": ("openvino_genai", 'pip install -e ".[openvino-genai]"'),
    "openvino-genai-bf16": ("openvino_genai", 'pip install -e ".[openvino-genai]"'),
    "openvino-genai-int8": ("openvino_genai", 'pip install -e ".[openvino-genai]"'),
    "openvino-genai-int4": ("openvino_genai", 'pip install -e ".[openvino-genai]"'),
}


def test_every_new_engine_is_listed():
    assert set(EXTRAS) | {"hf-fp16-dynamic"} <= set(registry.names())


@pytest.mark.parametrize("name", sorted(EXTRAS))
def test_missing_package_gives_the_install_command(name, monkeypatch):
    module, command = EXTRAS[name]
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda m, *a: None if m == module else real(m, *a))
    ok, why = registry.available(name)
    assert not ok and module in why and why.endswith(command)


@pytest.mark.parametrize("name", sorted(EXTRAS))
def test_installed_extras_make_the_engine_available(name):
    module, _ = EXTRAS[name]
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} not installed")
    assert registry.available(name) == (True, "")
