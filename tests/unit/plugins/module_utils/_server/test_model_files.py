"""The weight files of a captured command: a folder relative to its cwd, or the hub cache snapshot of a hub id."""
import json
import os

from ansible_collections.inferops.sglang.plugins.module_utils._server import model_files as _model_files

HASH = "0123456789abcdef0123456789abcdef01234567"
OLD = "f" * 40


def touch(path, size=10):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    return path


def hub(cache, repo="org/Model-7B", files=(("model-00001-of-00002.safetensors", 100),
                                           ("model-00002-of-00002.safetensors", 50), ("config.json", 5))):
    """A hub cache entry as huggingface_hub leaves it: blobs, a snapshot of symlinks, refs/main."""
    root = cache / ("models--" + repo.replace("/", "--"))
    for rev in (OLD, HASH):
        for i, (name, size) in enumerate(files):
            blob = touch(root / "blobs" / ("%s-%d" % (rev, i)), size)
            link = root / "snapshots" / rev / name
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(os.path.relpath(str(blob), str(link.parent)))
    touch(root / "refs" / "main").write_text(HASH)
    return root


def test_a_folder_relative_to_the_cwd_prefers_safetensors_and_ignores_subfolders(tmp_path):
    model = tmp_path / "models" / "llama"
    for name, size in (("model-1.safetensors", 30), ("model-2.safetensors", 20), ("pytorch_model.bin", 50),
                       ("tokenizer.json", 7), ("original/consolidated.00.pth", 90)):
        touch(model / name, size)
    m = _model_files.locate(["python", "-m", "sglang.launch_server", "--model-path", "models/llama"], {}, str(tmp_path))
    assert m["path"] == str(model) and m["files"] == 2 and m["bytes"] == 50 and m["msg"] is None
    assert m["paths"] == [str(model / "model-1.safetensors"), str(model / "model-2.safetensors")]


def test_the_index_names_the_files_loaded(tmp_path):
    model = tmp_path / "mistral"
    for name in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "consolidated.safetensors"):
        touch(model / name, 40)
    (model / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors",
        "c": "model-00002-of-00002.safetensors"}}))
    m = _model_files.locate(["sglang", "serve", "--model=%s" % model], {}, "/")
    assert [os.path.basename(p) for p in m["paths"]] == ["model-00001-of-00002.safetensors",
                                                         "model-00002-of-00002.safetensors"]


def test_bin_files_when_there_are_no_safetensors_and_a_gguf_file_itself(tmp_path):
    touch(tmp_path / "m" / "pytorch_model-1.bin", 3)
    touch(tmp_path / "m" / "pytorch_model-2.bin", 4)
    assert _model_files.locate(["x", "--model-path", "m"], {}, str(tmp_path))["bytes"] == 7
    gguf = touch(tmp_path / "q4.gguf", 9)
    m = _model_files.locate(["x", "--model-path", str(gguf)], {}, "/")
    assert m["paths"] == [str(gguf)] and m["bytes"] == 9


def test_a_hub_id_resolves_to_refs_main_snapshot_under_hf_home(tmp_path):
    root = hub(tmp_path / "hf" / "hub")
    m = _model_files.locate(["x", "--model-path", "org/Model-7B"], {"HF_HOME": str(tmp_path / "hf")}, "/srv")
    assert m["path"] == str(root / "snapshots" / HASH)
    assert m["paths"] == [str(root / "blobs" / ("%s-0" % HASH)), str(root / "blobs" / ("%s-1" % HASH))]
    assert m["files"] == 2 and m["bytes"] == 150


def test_the_hub_cache_from_hf_hub_cache_home_or_the_user_and_a_revision(tmp_path):
    root = hub(tmp_path / "c")
    env = {"HF_HUB_CACHE": str(tmp_path / "c"), "HF_HOME": str(tmp_path / "elsewhere")}
    assert _model_files.locate(["x", "--model-path", "org/Model-7B"], env, "/")["path"] == str(root / "snapshots" / HASH)
    pinned = _model_files.locate(["x", "--model-path", "org/Model-7B", "--revision", OLD], env, "/")
    assert pinned["path"] == str(root / "snapshots" / OLD)
    home = tmp_path / "home"
    hub(home / ".cache" / "huggingface" / "hub", repo="solo")
    assert _model_files.locate(["x", "--model-path", "solo"], {"HOME": str(home)}, "/")["files"] == 2
    assert _model_files.hub_cache({}, user="root").startswith(os.path.expanduser("~root"))


def test_what_cannot_be_found_says_why(tmp_path):
    m = _model_files.locate(["x", "--model-path", "org/absent"], {"HF_HOME": str(tmp_path)}, "/")
    assert m["path"] is None and m["files"] == 0 and "org/absent is neither a folder nor in the hub cache" in m["msg"]
    assert _model_files.locate(["x", "--port", "1"], {}, "/")["msg"] == "the command names no --model-path"
    (tmp_path / "empty").mkdir()
    assert _model_files.locate(["x", "--model-path", "empty"], {}, str(tmp_path))["msg"].startswith("no weight files")


def test_the_summary_line():
    m = {"files": 163, "bytes": 712 * 10 ** 9, "resident": int(0.41 * 712 * 10 ** 9) + 1, "available": 1.1e12}
    assert _model_files.summary(m) == "model: 712 GB in 163 files, 41 % in the page cache, 1.1 TB available"
    m["warm"] = {"read": 400 * 10 ** 9, "seconds": 210.4, "readers": 4, "bytes": m["bytes"], "resident_after": m["bytes"],
                 "stopped": "budget", "errors": []}
    assert _model_files.summary(m).endswith(
        "; warmed before the stop: 400 GB read in 210.4 s (4 readers), 100 % resident after, stopped by the time budget")
    assert _model_files.summary({"files": 0, "msg": "the command names no --model-path"}) == (
        "model: the command names no --model-path")
    assert _model_files.summary(None) == "model: not measured"
