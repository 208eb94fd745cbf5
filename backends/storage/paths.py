"""Where the app finds its shipped resources and keeps its caches.

The resources are the package `whistle_stop.resources` (resources/ in a source checkout, a folder
of the installed package otherwise), found through `importlib.resources`: a checkout, a wheel
install, an editable install and a zipped install all work. Where they are not plain files on disk
(a zip), they are unpacked once into the user cache, because the tokenizer and the engines need real
paths.
"""

from __future__ import annotations

import os
from pathlib import Path

from ... import resources as _shipped

# Every engine's worker imports this module before it is Ready, so what only some paths need
# (platformdirs, hashlib, importlib.resources for a zipped install) is imported where it is used:
# importing them all here would be part of each worker's cold start.

APP_NAME = "whistle-stop"


def cache_dir(*parts: str) -> Path:
    """The user cache folder (WHISTLE_STOP_CACHE overrides it, e.g. for tests)."""
    override = os.environ.get("WHISTLE_STOP_CACHE")
    if override:
        root = Path(override)
    else:
        from platformdirs import user_cache_dir

        root = Path(user_cache_dir(APP_NAME))
    path = root.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _files(node, prefix: str = ""):
    for child in sorted(node.iterdir(), key=lambda c: c.name):
        if child.is_dir():
            if child.name != "__pycache__":
                yield from _files(child, f"{prefix}{child.name}/")
        elif not child.name.endswith((".py", ".pyc")):
            yield f"{prefix}{child.name}", child


def _unpacked(root) -> Path:
    """A plain-file copy of a non-filesystem resource tree (a zip), made once per content."""
    import hashlib
    import shutil
    import uuid

    entries = [(name, node.read_bytes()) for name, node in _files(root)]
    digest = hashlib.sha256()
    for name, data in entries:
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    target = cache_dir("resources") / digest.hexdigest()[:16]
    if not (target / ".complete").exists():
        staging = target.with_name(f".{target.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        for name, data in entries:
            path = staging / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        (staging / ".complete").write_text("", encoding="utf-8")
        try:
            staging.rename(target)
        except OSError:  # another process unpacked it first (or a half copy without .complete is there)
            if not (target / ".complete").exists():
                shutil.rmtree(target, ignore_errors=True)
                staging.rename(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _resource_root() -> Path:
    folder = Path(_shipped.__file__).parent if getattr(_shipped, "__file__", None) else None
    if folder is not None and (folder / "tokenizer").is_dir():  # plain files: a checkout or an install
        return folder
    from importlib import resources

    root = resources.files(_shipped)
    return root if isinstance(root, Path) else _unpacked(root)


RESOURCES = _resource_root()
TOKENIZER_DIR = RESOURCES / "tokenizer"
CONFIGS_DIR = RESOURCES / "configs"
PROMPTS_DIR = RESOURCES / "prompts"
