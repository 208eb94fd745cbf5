"""`whistle_stop` for a source checkout that is not pip-installed.

Installed (wheel, `pip install .`, pipx or `pip install -e .`), the app is the package
`whistle_stop` with the subpackages `whistle_stop.backends`, `whistle_stop.gui` and
`whistle_stop.resources`, mapped from the folders backends/, gui/ and resources/ (see
pyproject.toml). In a checkout those folders sit at the top level, so this module stands in for the
package: giving it a `__path__` makes it a package whose subpackages are found in the checkout's
root, i.e. `whistle_stop.backends` is <checkout>/backends.

main.py and tests/conftest.py put this folder on `sys.path` (spawned engine workers inherit
`sys.path`) and on `PYTHONPATH` (for `python -m whistle_stop...` child processes such as the ONNX
builder). It wins over an installed copy: the wheel's `whistle_stop` is a namespace package, which
Python uses only when no regular module of that name is found on `sys.path`, and an editable
install's finder runs after `sys.path`.
"""

from pathlib import Path

__path__ = [str(Path(__file__).resolve().parents[2])]
