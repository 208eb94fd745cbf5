import json
import re
import shutil
import struct

import pytest

from whistle_stop.backends.errors import ModelError
from whistle_stop.backends.sources.model_files import RANDOM_LABEL, resolve_model, validate_folder
from whistle_stop.backends.sources.random_weights import gpt2_shapes
from whistle_stop.backends.sources.weights import mmap_numpy, read_header


def test_random_tiny_is_cached_and_labelled(tiny_model):
    again = resolve_model("random:tiny")
    assert again.folder == tiny_model.folder
    assert again.weights == "random" and again.weights_hash == tiny_model.weights_hash
    assert RANDOM_LABEL in again.label
    assert set(read_header(tiny_model.safetensors)) == set(gpt2_shapes(tiny_model.config))


def test_random_weights_are_seeded(tiny_model, tmp_path):
    from whistle_stop.backends.sources.random_weights import write_random_model

    write_random_model(tiny_model.config, tmp_path)
    a, b = mmap_numpy(tmp_path / "model.safetensors"), mmap_numpy(tiny_model.safetensors)
    assert all((a[k] == b[k]).all() for k in a)


def test_random_weights_are_the_same_file_and_hash_wherever_they_are_written(tiny_model, tmp_path):
    """The weights hash in environment.json names the same seeded weights on every machine: the file
    is byte for byte the same each time it is written (safetensors' metadata map comes out in a
    per-process random order, so with several keys it was not: about 5 in 6 pairs differed)."""
    import subprocess
    import sys

    from whistle_stop.backends.sources.model_files import weights_hash

    script = (
        "import json, sys; from pathlib import Path; "
        "from whistle_stop.backends.sources.random_weights import write_random_model; "
        "write_random_model(json.loads(sys.argv[1]), Path(sys.argv[2]))"
    )
    folders = [tmp_path / str(i) for i in range(6)]
    for folder in folders:  # each in a process of its own, as on another machine
        subprocess.run([sys.executable, "-c", script, json.dumps(tiny_model.config), str(folder)], check=True)
    files = [(folder / "model.safetensors").read_bytes() for folder in folders]
    assert all(file == files[0] for file in files)
    assert len({weights_hash(folder / "model.safetensors") for folder in folders}) == 1


def test_a_random_model_written_in_an_older_layout_is_not_reused(tmp_path, monkeypatch):
    """A cached random model from before one metadata key kept its per-machine header (and weights
    hash); the layout is in the folder's name, so such a folder is written again, not read."""
    from whistle_stop.backends.sources import model_files, random_weights

    monkeypatch.setenv("WHISTLE_STOP_CACHE", str(tmp_path))
    current = model_files.resolve_model("random:tiny").folder
    monkeypatch.setattr(random_weights, "FILE_FORMAT", random_weights.FILE_FORMAT + 1)
    new = model_files.resolve_model("random:tiny").folder
    assert new != current and (new / "model.safetensors").exists()
    assert f"-v{random_weights.FILE_FORMAT}-" in new.name
    # a folder of the first layout (no -v in its name) is removed when the current one is made
    digest = new.name.rsplit("-", 1)[1]
    first = new.with_name(new.name.removesuffix(f"-v{random_weights.FILE_FORMAT}-{digest}") + f"-{digest}")
    shutil.copytree(new, first)
    shutil.rmtree(new)
    assert model_files.resolve_model("random:tiny").folder == new and not first.exists()


def _copy(model, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(model.folder, folder)
    return folder


def test_local_folder_loads(tiny_model, tmp_path):
    folder = _copy(tiny_model, tmp_path)
    model = resolve_model(str(folder))
    assert model.weights == "real" and model.weights_hash == tiny_model.weights_hash


def test_truncated_weights_are_reported(tiny_model, tmp_path):
    folder = _copy(tiny_model, tmp_path)
    path = folder / "model.safetensors"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(ModelError, match="corrupt or incomplete"):
        resolve_model(str(folder))


def test_garbage_weights_are_reported(tiny_model, tmp_path):
    folder = _copy(tiny_model, tmp_path)
    (folder / "model.safetensors").write_bytes(b"not a safetensors file at all")
    with pytest.raises(ModelError, match="corrupt or incomplete"):
        resolve_model(str(folder))


def test_missing_tensor_and_wrong_shape_are_reported(tiny_model, tmp_path):
    folder = _copy(tiny_model, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config["n_layer"] = 3  # the weights have 2 layers
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelError, match="holds 2 layers, config.json says n_layer=3"):
        validate_folder(folder)
    config["n_layer"], config["n_embd"] = 2, 128
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelError, match="shape"):
        validate_folder(folder)


@pytest.mark.parametrize(
    "change, why",
    [
        ({"n_head": 0}, "n_head must be a whole number >= 1, got 0"),  # was every engine's ZeroDivisionError
        ({"n_layer": -1}, "n_layer must be a whole number >= 1"),  # was a model with no layers, run
        ({"n_embd": None}, "n_embd is missing"),
        ({"layer_norm_epsilon": "x"}, "layer_norm_epsilon must be a number in (0, 1)"),  # was every engine's
        ({"n_layer": 1}, "holds 2 layers, config.json says n_layer=1"),  # was half the model, run
    ],
    ids=["n_head", "n_layer", "n_embd", "epsilon", "fewer_layers"],
)
def test_a_config_with_absurd_values_is_refused_before_any_engine(tiny_model, tmp_path, change, why):
    folder = _copy(tiny_model, tmp_path)
    (folder / "config.json").write_text(json.dumps({**tiny_model.config, **change}))
    with pytest.raises(ModelError, match=re.escape(why)):
        validate_folder(folder)


def test_a_config_that_is_not_an_object_is_refused(tiny_model, tmp_path):
    folder = _copy(tiny_model, tmp_path)
    (folder / "config.json").write_text("[1, 2]")
    with pytest.raises(ModelError, match="not a JSON object"):  # was AttributeError: 'list' ... 'get'
        validate_folder(folder)


def test_a_huge_n_layer_is_refused_before_its_shapes_are_listed(tiny_model, tmp_path, monkeypatch):
    import whistle_stop.backends.sources.random_weights as random_weights

    def guarded(config):
        assert config["n_layer"] < 100, "would list 10**9 layers' tensors: the memory runs out"
        return gpt2_shapes(config)

    monkeypatch.setattr(random_weights, "gpt2_shapes", guarded)
    folder = _copy(tiny_model, tmp_path)
    (folder / "config.json").write_text(json.dumps({**tiny_model.config, "n_layer": 10**9}))
    with pytest.raises(ModelError, match="holds 2 layers"):
        validate_folder(folder)


def _rewrite_header(path, edit) -> None:
    """The safetensors file at `path` with its JSON header passed through `edit` (data unchanged)."""
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = edit(json.loads(raw[8 : 8 + length]))
    text = json.dumps(header, separators=(",", ":")).encode().ljust(length)  # same length: offsets stay right
    assert len(text) == length
    path.write_bytes(raw[:8] + text + raw[8 + length :])


@pytest.mark.parametrize(
    "edit, why",
    [
        (lambda h: {**h, "wpe.weight": {**h["wpe.weight"], "dtype": "F16"}}, "spans"),  # was a failed reshape
        (lambda h: {**h, "wpe.weight": {**h["wpe.weight"], "data_offsets": [0]}}, "malformed header entry"),
        (lambda h: list(h), "not a JSON object"),
    ],
    ids=["span", "offsets", "list"],
)
def test_a_malformed_safetensors_header_is_reported(tiny_model, tmp_path, edit, why):
    folder = _copy(tiny_model, tmp_path)
    _rewrite_header(folder / "model.safetensors", edit)
    with pytest.raises(ModelError, match=why):
        validate_folder(folder)


def test_a_garbled_weight_hash_cache_is_rebuilt(tiny_model):
    from whistle_stop.backends.sources.model_files import weights_hash
    from whistle_stop.backends.storage.paths import cache_dir

    index = cache_dir() / "weight-hashes.json"
    index.write_text("[1]")  # JSON, but not the object it should be
    assert weights_hash(tiny_model.safetensors) == tiny_model.weights_hash  # was TypeError
    assert tiny_model.weights_hash in index.read_text()


def test_pickled_checkpoint_is_refused_not_loaded(tmp_path):
    folder = tmp_path / "pickled"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04 pretend pickle")
    with pytest.raises(ModelError, match="never unpickles"):
        resolve_model(str(folder))


def test_missing_config_and_bad_json(tiny_model, tmp_path):
    folder = _copy(tiny_model, tmp_path)
    (folder / "config.json").write_text("{not json")
    with pytest.raises(ModelError, match="not valid JSON"):
        resolve_model(str(folder))
    (folder / "config.json").unlink()
    with pytest.raises(ModelError, match="no config.json"):
        resolve_model(str(folder))


def test_unknown_models():
    with pytest.raises(ModelError, match="random:tiny"):
        resolve_model("random:nope")
    with pytest.raises(ModelError, match="unknown model"):
        resolve_model("surely-not-a-model-xyz")  # HF_HUB_OFFLINE=1 in tests: fails at once
    with pytest.raises(ModelError, match="does not exist"):
        resolve_model("./no/such/folder")


def test_auto_falls_back_to_random_gpt2_with_one_warning(monkeypatch):
    import whistle_stop.backends.sources.model_files as models

    monkeypatch.setattr(
        models, "_random", lambda spec, asked: models.ModelFiles(asked, spec, models.Path("."), "random", "x", {})
    )
    model = resolve_model("auto")
    assert model.model_id == "random:gpt2" and model.is_random
    assert "random:gpt2" in model.notice and RANDOM_LABEL in model.notice and "\n" not in model.notice
    assert "gpt2 is not cached and the hub cannot be reached" in model.notice
