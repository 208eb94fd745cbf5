"""Hub downloads through huggingface_hub: safetensors only, cached, offline once cached."""

from __future__ import annotations

import threading
from pathlib import Path

from ..errors import ModelError

PATTERNS = ["config.json", "model.safetensors", "generation_config.json"]


class HubUnreachable(ModelError):
    """Not cached, and the hub could not be asked (offline, DNS, HTTP errors)."""

    def __init__(self, repo_id: str, reason: str) -> None:
        super().__init__(
            f"unknown model {repo_id!r}: not a local folder, not cached, and the hub could not be reached ({reason})"
        )
        self.reason = reason


class DownloadCancelled(ModelError):
    """The user stopped a hub download. Not "the hub is unreachable": `auto` must not fall back."""


def fetch_safetensors_model(repo_id: str, progress=None, cancel: threading.Event | None = None) -> Path:
    """Folder with config.json + model.safetensors for `repo_id`, downloading it once.

    `cancel` (set from any thread) stops a download at its next progress report with
    DownloadCancelled; what was fetched stays in the hub cache and a later call resumes it."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        folder = Path(snapshot_download(repo_id, allow_patterns=PATTERNS, local_files_only=True))
        if (folder / "model.safetensors").exists() and (folder / "config.json").exists():
            return folder
    except (LocalEntryNotFoundError, OSError, ValueError):
        pass
    return _download(repo_id, progress, cancel)


def cached_folder(repo_id: str) -> Path | None:
    """The hub cache's folder for `repo_id` when its files are there, else None (never downloads)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        folder = Path(snapshot_download(repo_id, allow_patterns=PATTERNS, local_files_only=True))
    except (LocalEntryNotFoundError, OSError, ValueError):
        return None
    return folder if (folder / "model.safetensors").exists() and (folder / "config.json").exists() else None


def _check(repo_id: str, cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise DownloadCancelled(f"download of {repo_id!r} cancelled")


def _download(repo_id: str, progress, cancel: threading.Event | None = None) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import RepositoryNotFoundError

    _check(repo_id, cancel)
    wanted = progress is not None or cancel is not None
    kwargs = {"tqdm_class": _progress_tqdm(progress, cancel, repo_id)} if wanted else {}
    try:
        folder = Path(snapshot_download(repo_id, allow_patterns=PATTERNS, **kwargs))
    except DownloadCancelled:
        raise
    except RepositoryNotFoundError as exc:
        raise ModelError(f"unknown model {repo_id!r}: no such local folder or hub repository") from exc
    except Exception as exc:  # offline, DNS, HTTP errors: the hub's client raises many kinds
        _check(repo_id, cancel)  # the client may wrap our DownloadCancelled in its own error
        raise HubUnreachable(repo_id, _short_reason(exc)) from exc
    if not (folder / "model.safetensors").exists():
        raise ModelError(f"hub model {repo_id!r} has no model.safetensors; whistle-stop never loads pickled weights")
    return folder


def _progress_tqdm(progress, cancel: threading.Event | None = None, repo_id: str = "model"):
    """A tqdm class that reports (message, fraction) to `progress`, e.g. for the GUI, and raises
    DownloadCancelled from the download's own thread once `cancel` is set."""
    from huggingface_hub.utils import tqdm as hf_tqdm

    class ReportingTqdm(hf_tqdm):
        # A bar disabled for want of a terminal (a GUI started from a desktop) neither counts nor
        # keeps its `desc`: keep both here, so progress is reported all the same.
        def __init__(self, *args, **kwargs):
            self._label = kwargs.get("desc") or (args[1] if len(args) > 1 and isinstance(args[1], str) else "")
            self._reported = 0
            super().__init__(*args, **kwargs)

        def update(self, n=1):
            _check(repo_id, cancel)
            shown = super().update(n)
            self._reported += n or 0
            total = getattr(self, "total", None)
            if progress is not None and total:
                progress(f"downloading {self._label or 'model'}", min(1.0, self._reported / total))
            return shown

    return ReportingTqdm


def _short_reason(exc: BaseException) -> str:
    """'ConnectError: Name or service not known' rather than the client's whole first line."""
    import re

    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    text = re.sub(r"^Got:\s*", "", text)
    text = re.sub(r"\[Errno -?\d+\]\s*", "", text)
    return text[:120]
