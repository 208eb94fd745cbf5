"""Hub downloads through huggingface_hub: safetensors only, cached, offline once cached."""

from __future__ import annotations

from pathlib import Path

from .errors import ModelError

PATTERNS = ["config.json", "model.safetensors", "generation_config.json"]


def fetch_safetensors_model(repo_id: str, progress=None) -> Path:
    """Folder with config.json + model.safetensors for `repo_id`, downloading it once."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        folder = Path(snapshot_download(repo_id, allow_patterns=PATTERNS, local_files_only=True))
        if (folder / "model.safetensors").exists() and (folder / "config.json").exists():
            return folder
    except (LocalEntryNotFoundError, OSError, ValueError):
        pass
    return _download(repo_id, progress)


def _download(repo_id: str, progress) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import RepositoryNotFoundError

    kwargs = {"tqdm_class": _progress_tqdm(progress)} if progress else {}
    try:
        folder = Path(snapshot_download(repo_id, allow_patterns=PATTERNS, **kwargs))
    except RepositoryNotFoundError as exc:
        raise ModelError(f"unknown model {repo_id!r}: no such local folder or hub repository") from exc
    except Exception as exc:  # offline, DNS, HTTP errors: the hub's client raises many kinds
        reason = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
        raise ModelError(
            f"unknown model {repo_id!r}: not a local folder, not cached, and the hub could not be reached ({reason})"
        ) from exc
    if not (folder / "model.safetensors").exists():
        raise ModelError(f"hub model {repo_id!r} has no model.safetensors; whistle-stop never loads pickled weights")
    return folder


def _progress_tqdm(progress):
    """A tqdm class that also reports (message, fraction) to `progress`, e.g. for the GUI."""
    from huggingface_hub.utils import tqdm as hf_tqdm

    class ReportingTqdm(hf_tqdm):
        def update(self, n=1):
            shown = super().update(n)
            if self.total:
                progress(f"downloading {self.desc or 'model'}", min(1.0, self.n / self.total))
            return shown

    return ReportingTqdm
