"""whistle-stop: `python main.py` opens the app; `python main.py bench ...` runs headless.

From a source checkout: `whistle_stop` (the installed package's name) is this folder, through
scripts/checkout/whistle_stop.py. Installed, the same entry point is the `whistle-stop` command.
"""

import os
import sys
from pathlib import Path

CHECKOUT = str(Path(__file__).resolve().parent / "scripts" / "checkout")


def use_checkout() -> None:
    """Import `whistle_stop` from this checkout, here and in every Python this process starts."""
    if CHECKOUT not in sys.path:
        sys.path.append(CHECKOUT)
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if CHECKOUT not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [CHECKOUT, *paths]))


use_checkout()  # at import: spawned workers re-run this file (as __mp_main__) before unpickling their target


def _main() -> int:
    from whistle_stop.backends.cli.launcher import main

    return main()


if __name__ == "__main__":
    sys.exit(_main())
