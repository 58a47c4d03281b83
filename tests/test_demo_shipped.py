"""The shipped tiny CLIPs of the demo: the compact safetensors files expand to the pretrained weights, the folder's
manifest and files are checked (a changed file is named, a damaged or missing one is one error line), and the shipped
pair fits 10 MB by a parameter count made here from the architecture."""
from __future__ import annotations

import hashlib
import json
import os
import struct
from dataclasses import asdict, replace

import numpy as np
import open_clip
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

import clip
from demo import compact, pretrain, shipped
from demo.captions import pretraining_captions
from engine.errors import CorruptFileError, InvalidInputError

TINY_SPEC = pretrain.TinyClipSpec(embed_dim=32, image_size=32, patch_size=16, vision_width=64, vision_layers=2,
                                  text_width=64, text_layers=2)
TINY_SHIPPED = {"student": pretrain.PretrainParams(size="tiny", steps=20, batch_size=16, seed=1),
                "teacher": pretrain.PretrainParams(size="tiny", steps=20, batch_size=16, seed=2)}
VOCAB = 49408


@pytest.fixture(scope="module")
def tiny():
    """The tiny architecture and a tiny ``SHIPPED`` pair in place, with each role's 20-step pretrained state dict."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(pretrain.SPECS, "tiny", TINY_SPEC)
        mp.setattr(pretrain, "SHIPPED", TINY_SHIPPED)
        mp.setattr(shipped, "SHIPPED", TINY_SHIPPED)
        yield {role: pretrain.pretrain(params, verbose=False) for role, params in TINY_SHIPPED.items()}


@pytest.fixture(scope="module")
def weights(tiny, tmp_path_factory):
    """A weights folder written by the shipping command (``--ship``) for the tiny pair."""
    folder = str(tmp_path_factory.mktemp("weights"))
    shipped.regenerate(folder, ship=True, command="test")
    return folder


def file_bytes_sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_state_dict_sha256_is_the_documented_digest():
    state_dict = {"b": torch.tensor([1.0, -2.5]), "a": torch.tensor(3, dtype=torch.int64)}
    reference = hashlib.sha256(b"a|torch.int64|()|" + struct.pack("<q", 3)
                               + b"b|torch.float32|(2,)|" + struct.pack("<2f", 1.0, -2.5)).hexdigest()
    assert compact.state_dict_sha256(state_dict) == reference
    assert compact.state_dict_sha256({**state_dict, "b": torch.tensor([1.0, -2.0])}) != reference
    assert compact.state_dict_sha256({**state_dict, "b": torch.tensor([[1.0, -2.5]])}) != reference


def test_float32_expansion_equals_the_pretrained_state_dict(tiny, tmp_path):
    state_dict = tiny["student"]
    path = str(tmp_path / "student.safetensors")
    compact.write_compact(path, state_dict, TINY_SHIPPED["student"], "float32")
    expanded = compact.read_compact(path)
    assert set(expanded) == set(state_dict)
    assert [key for key in state_dict if not torch.equal(expanded[key], state_dict[key])] == []

    with safe_open(path, framework="pt") as f:
        ids = f.get_tensor(compact.IDS)
        assert compact.EMBEDDING not in f.keys() and f.get_tensor(compact.ROWS).shape == (len(ids), 64)
    # the rows stored are those pretraining changed: a few dozen caption tokens, the end-of-text token among them
    torch.manual_seed(1)
    initial = pretrain.build_open_clip(TINY_SPEC).state_dict()[compact.EMBEDDING]
    changed = (state_dict[compact.EMBEDDING] != initial).any(dim=1).nonzero().flatten()
    assert torch.equal(ids, changed) and 20 < len(ids) < 200 and 49407 in ids.tolist()


def int8_reference(array: np.ndarray) -> np.ndarray:
    """Symmetric per-row int8 rounding of a float32 array, rows along the first axis, computed in numpy."""
    rows = array.reshape(array.shape[0], -1).astype(np.float32)
    scale = (np.abs(rows).max(axis=1) / np.float32(127)).astype(np.float32)
    q = np.clip(np.round(rows / np.where(scale > 0, scale, np.float32(1))[:, None]), -127, 127)
    return (q.astype(np.float32) * scale[:, None]).reshape(array.shape)


@pytest.mark.parametrize("storage", ["float16", "int8"])
def test_rounded_storage_rounds_only_what_it_stores(tiny, tmp_path, storage):
    state_dict = tiny["teacher"]
    path = str(tmp_path / f"{storage}.safetensors")
    compact.write_compact(path, state_dict, TINY_SHIPPED["teacher"], storage)
    expanded = compact.read_compact(path)

    def rounded(array: np.ndarray) -> np.ndarray:
        if storage == "int8" and array.ndim >= 2:
            return int8_reference(array)
        return array.astype(np.float16).astype(np.float32)

    torch.manual_seed(2)
    initial = pretrain.build_open_clip(TINY_SPEC).state_dict()[compact.EMBEDDING]
    for key, value in state_dict.items():
        original = value.numpy()
        if key == compact.EMBEDDING:
            changed = (value != initial).any(dim=1).numpy()
            np.testing.assert_array_equal(expanded[key].numpy()[~changed], original[~changed])  # rebuilt, exact
            np.testing.assert_array_equal(expanded[key].numpy()[changed], rounded(original[changed]))
        else:
            np.testing.assert_array_equal(expanded[key].numpy(), rounded(original), err_msg=key)
        assert expanded[key].dtype == torch.float32


def test_compact_files_are_safetensors_without_pickle(weights):
    for role in shipped.ROLES:
        path = os.path.join(weights, shipped.file_name(role))
        with open(path, "rb") as f:
            data = f.read()
        # safetensors' layout: an 8-byte little-endian header length, a JSON header, then the raw tensor bytes
        (length,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8:8 + length])
        assert json.loads(header["__metadata__"]["tinyclip"])["format"] == compact.FORMAT
        assert 8 + length + max(entry["data_offsets"][1] for name, entry in header.items()
                                if name != "__metadata__") == len(data)
        with safe_open(path, framework="pt") as f:
            assert set(f.keys()) == set(header) - {"__metadata__"}
            assert json.loads(f.metadata()["tinyclip"])["seed"] == TINY_SHIPPED[role].seed


def test_manifest_records_each_file(tiny, weights):
    manifest = shipped.read_manifest(weights)
    for role in shipped.ROLES:
        entry = manifest["files"][role]
        path = os.path.join(weights, shipped.file_name(role))
        assert entry["sha256"] == entry["shipped_sha256"] == file_bytes_sha256(path)
        assert entry["bytes"] == os.path.getsize(path)
        assert entry["params"] == json.loads(json.dumps(asdict(TINY_SHIPPED[role])))
        assert entry["spec"] == asdict(TINY_SPEC) and entry["storage"] == "float32"
        assert entry["torch"] == torch.__version__ and entry["open_clip"] == open_clip.__version__
        assert entry["command"] == "test" and entry["threads"] >= 1 and entry["seconds"] > 0
        assert entry["expanded_sha256"] == compact.state_dict_sha256(tiny[role])  # float32: the pretrained weights


def test_clip_files_expand_once_into_files_clip_load_reads(tiny, weights, tmp_path, capsys):
    student, teacher = shipped.clip_files(str(tmp_path / "cache"), weights)
    assert capsys.readouterr().out == ""
    for path, role in ((student, "student"), (teacher, "teacher")):
        loaded = torch.load(path, weights_only=True)
        assert [key for key in tiny[role] if not torch.equal(loaded[key], tiny[role][key])] == []
        model = clip.load_model(path)
        assert model.embed_dim == 32 and model.context_length == 77
    mtimes = [os.stat(path).st_mtime_ns for path in (student, teacher)]
    assert shipped.clip_files(str(tmp_path / "cache"), weights) == (student, teacher)
    assert [os.stat(path).st_mtime_ns for path in (student, teacher)] == mtimes
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("damage", [b"not a torch file", "other weights"])
def test_a_cached_expansion_without_the_recorded_weights_is_rewritten(tiny, weights, tmp_path, damage):
    cache = tmp_path / "cache"
    student, _ = shipped.clip_files(str(cache), weights)
    if isinstance(damage, bytes):
        (cache / os.path.basename(student)).write_bytes(damage)
    else:
        torch.save({**tiny["student"], "logit_scale": torch.tensor(0.0)}, student)
    assert shipped.clip_files(str(cache), weights)[0] == student
    loaded = torch.load(student, weights_only=True)
    assert [key for key in tiny["student"] if not torch.equal(loaded[key], tiny["student"][key])] == []


def copy_folder(source: str, target) -> str:
    os.makedirs(target)
    for name in os.listdir(source):
        with open(os.path.join(source, name), "rb") as f, open(os.path.join(target, name), "wb") as g:
            g.write(f.read())
    return str(target)


def test_regenerated_file_is_named_in_one_line(tiny, weights, tmp_path, capsys):
    folder = copy_folder(weights, tmp_path / "weights")
    path = os.path.join(folder, shipped.file_name("student"))
    compact.write_compact(path, tiny["student"], TINY_SHIPPED["student"], "float16")  # a valid file, not the shipped
    student, _ = shipped.clip_files(str(tmp_path / "cache"), folder)
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"note: the demo runs on regenerated tiny CLIPs, not the shipped ones ({path}), so its numbers "
                     "will differ from README.md and docs/demo.md"]
    assert torch.equal(torch.load(student, weights_only=True)["ln_final.weight"],
                       tiny["student"]["ln_final.weight"].half().float())


def run_expand(folder: str, cache, capsys) -> tuple[int, list[str], str]:
    status = shipped.main(["expand", "--weights", folder, "--cache", str(cache)])
    captured = capsys.readouterr()
    return status, captured.err.splitlines(), captured.out


@pytest.mark.parametrize("expanded_before", [False, True])
def test_flipped_byte_in_the_tensors_is_one_error_line(weights, tmp_path, capsys, expanded_before):
    folder = copy_folder(weights, tmp_path / "weights")
    if expanded_before:  # a good expansion in the cache does not hide the damage
        shipped.clip_files(str(tmp_path / "cache"), folder)
    path = os.path.join(folder, shipped.file_name("teacher"))
    with open(path, "r+b") as f:
        f.seek(-3, os.SEEK_END)
        byte = f.read(1)
        f.seek(-3, os.SEEK_END)
        f.write(bytes([byte[0] ^ 0x10]))
    status, err, out = run_expand(folder, tmp_path / "cache", capsys)
    assert status == 2 and len(err) == 1 and err[0].startswith(f"error: {path} ")
    assert err[0].endswith("regenerate the tiny CLIPs with make demo-pretrain")
    assert out.startswith("note: the demo runs on regenerated tiny CLIPs") and path in out
    assert [name for name in os.listdir(tmp_path / "cache") if name.startswith(".tmp-")] == []


def test_swapped_files_are_one_error_line(weights, tmp_path, capsys):
    """The student's file holding the teacher's CLIP and the teacher's the student's: refused in one line before any
    expansion (the roles would run exchanged), though each file is a good compact file of the manifest's."""
    folder = copy_folder(weights, tmp_path / "weights")
    student, teacher = (os.path.join(folder, shipped.file_name(role)) for role in shipped.ROLES)
    os.rename(student, student + ".swap")
    os.rename(teacher, student)
    os.rename(student + ".swap", teacher)
    status, err, out = run_expand(folder, tmp_path / "cache", capsys)
    assert (status, out) == (2, "")
    assert err == [f"error: {student} holds the teacher's tiny CLIP, not the student's that "
                   f"{os.path.join(folder, 'manifest.json')} records (tiny); put each file back in its place "
                   "(tinyclip-student.safetensors, tinyclip-teacher.safetensors) or regenerate the tiny CLIPs with "
                   "make demo-pretrain"]
    assert not os.path.exists(tmp_path / "cache")


def test_flipped_byte_in_the_header_is_one_error_line(weights, tmp_path, capsys):
    folder = copy_folder(weights, tmp_path / "weights")
    path = os.path.join(folder, shipped.file_name("student"))
    with open(path, "r+b") as f:
        f.seek(8)
        f.write(b"[")
    with pytest.raises(CorruptFileError, match="is not a readable safetensors file"):
        compact.read_compact(path)
    status, err, _ = run_expand(folder, tmp_path / "cache", capsys)
    assert status == 2 and len(err) == 1 and err[0].startswith(f"error: {path} is not a readable safetensors file")


def test_other_initial_rows_are_refused(tiny, tmp_path):
    """A torch that draws other initial weights (stood in for by a file recording another seed) is caught by the
    expanded SHA-256, not silently expanded."""
    path = str(tmp_path / "student.safetensors")
    compact.write_compact(path, tiny["student"], TINY_SHIPPED["student"], "float32")
    with safe_open(path, framework="pt") as f:
        tensors = {name: f.get_tensor(name) for name in f.keys()}
        metadata = f.metadata()
    record = json.loads(metadata["tinyclip"])
    save_file(tensors, path, metadata={"tinyclip": json.dumps({**record, "seed": 3})})
    with pytest.raises(InvalidInputError, match="draws other initial weights"):
        compact.read_compact(path)


@pytest.mark.parametrize("missing", ["tinyclip-student.safetensors", "tinyclip-teacher.safetensors", "manifest.json"])
def test_missing_file_is_one_error_line(weights, tmp_path, capsys, missing):
    folder = copy_folder(weights, tmp_path / "weights")
    os.remove(os.path.join(folder, missing))
    status, err, out = run_expand(folder, tmp_path / "cache", capsys)
    assert status == 2 and out == ""
    assert err == [f"error: {os.path.join(folder, missing)} is missing; regenerate the tiny CLIPs with make "
                   "demo-pretrain"]


@pytest.mark.parametrize("text", ["{", '{"format": "petr-tinyclip-compact/1", "files": {"student": {}}}'])
def test_unreadable_manifest_is_one_error_line(weights, tmp_path, capsys, text):
    folder = copy_folder(weights, tmp_path / "weights")
    manifest = os.path.join(folder, "manifest.json")
    with open(manifest, "w") as f:
        f.write(text)
    status, err, out = run_expand(folder, tmp_path / "cache", capsys)
    assert status == 2 and out == "" and len(err) == 1
    assert err[0].startswith(f"error: {manifest} is not a tiny-CLIP manifest (")
    assert err[0].endswith("; regenerate the tiny CLIPs with make demo-pretrain")


def test_plain_regeneration_keeps_the_shipped_sums(tiny, weights, tmp_path):
    folder = copy_folder(weights, tmp_path / "weights")
    shipped_sums = {role: entry["shipped_sha256"] for role, entry in shipped.read_manifest(folder)["files"].items()}
    with pytest.MonkeyPatch.context() as mp:
        other = {**TINY_SHIPPED, "student": replace(TINY_SHIPPED["student"], steps=21)}
        mp.setattr(shipped, "SHIPPED", other)
        shipped.regenerate(folder, ship=False, command="again")
    files = shipped.read_manifest(folder)["files"]
    assert {role: entry["shipped_sha256"] for role, entry in files.items()} == shipped_sums
    student = os.path.join(folder, shipped.file_name("student"))
    assert files["student"]["sha256"] == file_bytes_sha256(student) != shipped_sums["student"]
    assert files["teacher"]["sha256"] == shipped_sums["teacher"]  # the same pretraining, bit for bit


def hand_counts(spec: pretrain.TinyClipSpec, rows: int) -> tuple[int, int, int]:
    """(elements of 2-D+ tensors, their first-dimension rows, elements of 0-D/1-D tensors) of a compact file of
    ``spec``: OpenAI CLIP's ViT layout, the token embedding cut to ``rows`` rows plus their int64 ids."""
    def layer(w: int) -> tuple[int, int, int]:  # in_proj, out_proj, c_fc, c_proj matrices; 2 norms and 4 biases
        return 12 * w * w, 3 * w + w + 4 * w + w, 2 * 2 * w + 3 * w + w + 4 * w + w

    v, t, e = spec.vision_width, spec.text_width, spec.embed_dim
    grid = (spec.image_size // spec.patch_size) ** 2
    vl, tl = layer(v), layer(t)
    matrices = (v * 3 * spec.patch_size ** 2 + (grid + 1) * v + v * e + spec.vision_layers * vl[0]
                + rows * t + 77 * t + t * e + spec.text_layers * tl[0])
    first_dims = v + (grid + 1) + v + spec.vision_layers * vl[1] + rows + 77 + t + spec.text_layers * tl[1]
    vectors = v + 2 * v + 2 * v + spec.vision_layers * vl[2] + 2 * t + spec.text_layers * tl[2] + 1
    return matrices, first_dims, vectors


def hand_bytes(spec: pretrain.TinyClipSpec, storage: str, rows: int) -> int:
    matrices, first_dims, vectors = hand_counts(spec, rows)
    per_element = {"float32": 4, "float16": 2}
    if storage in per_element:
        return per_element[storage] * (matrices + vectors) + 8 * rows
    return matrices + 4 * first_dims + 2 * vectors + 8 * rows


def test_shipped_pair_fits_ten_megabytes_counted_from_the_architecture():
    tokenizer = open_clip.get_tokenizer("ViT-B-16")
    rows = len({int(token) for row in tokenizer([c for cs in pretraining_captions() for c in cs]) for token in row})
    for size, spec in pretrain.SPECS.items():
        matrices, _, vectors = hand_counts(spec, rows)
        full = sum(p.numel() for p in pretrain.build_open_clip(spec).state_dict().values())
        assert matrices + vectors == full - (VOCAB - rows) * spec.text_width, size  # the count is open_clip's
        for storage in compact.STORAGES:
            assert compact.stored_bytes(spec, storage, rows) == hand_bytes(spec, storage, rows), (size, storage)

    specs = [pretrain.SPECS[pretrain.SHIPPED[role].size] for role in shipped.ROLES]
    storage = shipped.shipped_storage()
    total = {s: sum(hand_bytes(spec, s, rows) + compact.HEADER_ALLOWANCE for spec in specs) for s in compact.STORAGES}
    assert total[storage] <= 10_000_000
    more_precise = compact.STORAGES[:compact.STORAGES.index(storage)]
    assert all(total[s] > 10_000_000 for s in more_precise)  # the most precise storage that fits
    for spec in specs:  # the untouched embedding rows are most of a full float32 file
        full = 4 * sum(p.numel() for p in pretrain.build_open_clip(spec).state_dict().values())
        assert hand_bytes(spec, "float32", rows) < full / 3


def test_tiny_file_size_is_the_planned_one(tiny, tmp_path):
    path = str(tmp_path / "student.safetensors")
    compact.write_compact(path, tiny["student"], TINY_SHIPPED["student"], "int8")
    with safe_open(path, framework="pt") as f:
        rows = len(f.get_tensor(compact.IDS))
    planned = hand_bytes(TINY_SPEC, "int8", rows)
    assert planned < os.path.getsize(path) <= planned + compact.HEADER_ALLOWANCE


def test_a_cached_pretraining_of_the_same_parameters_is_shipped_as_it_is(tiny, tmp_path):
    cache = str(tmp_path / "cache")
    for role, params in TINY_SHIPPED.items():
        pretrain.save_state_dict(tiny[role], pretrain.default_path(params, cache), params, seconds=12.34)
    folder = str(tmp_path / "weights")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(shipped, "pretrain", None)  # a new pretraining would fail: none may happen
        shipped.regenerate(folder, ship=True, command="from cache", cache_dir=cache)
    files = shipped.read_manifest(folder)["files"]
    for role in TINY_SHIPPED:
        assert files[role]["seconds"] == 12.3 and files[role]["threads"] == torch.get_num_threads()
        assert files[role]["expanded_sha256"] == compact.state_dict_sha256(tiny[role])
