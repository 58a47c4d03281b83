"""Compact weights-only files of the demo's tiny CLIPs (safetensors, no pickle): every tensor of the state dict but the
token-embedding rows that pretraining left at their initial values, which the reader rebuilds from the seed.

Pretraining trains only the embedding rows of the tokens in its captions (a few dozen of 49408), so a file holds
those rows and their token ids; the other rows are a function of the seed and the architecture
(``demo.pretrain.initial_model``). A file records the SHA-256 of the state dict it expands to, so a torch whose random
draws differ from the writer's is refused with one line instead of giving other weights.

Storage precisions: ``float32`` (exact), ``float16``, ``int8`` (tensors of two or more dimensions as int8 with one
float32 scale per first-dimension row, the others float16). A file expands to float32; the CLIP it holds is defined
as that expansion, whatever the precision of the pretraining it came from.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save as safetensors_bytes

from demo.pretrain import SPECS, PretrainParams, TinyClipSpec, build_open_clip, caption_tokens, initial_model
from engine.atomic import atomic_write
from engine.errors import CorruptFileError, InvalidInputError, first_line

FORMAT = "petr-tinyclip-compact/1"
STORAGES = ("float32", "float16", "int8")
"""Storage precisions, most precise first."""
EMBEDDING = "token_embedding.weight"
IDS, ROWS = f"{EMBEDDING}:ids", f"{EMBEDDING}:rows"
"""The stored token ids whose embedding rows pretraining changed, and those rows."""
INT8, SCALE = ":int8", ":scale"
"""Name suffixes of an int8 tensor and its per-row scales."""
HEADER_ALLOWANCE = 16 * 1024
"""Bytes allowed for a file's JSON header (tensor names, shapes, offsets, metadata) when sizes are planned."""
METADATA_KEY = "tinyclip"
"""The safetensors metadata entry holding a file's record (JSON; one entry, since safetensors writes several in no
fixed order and a file must be the same bytes each time its pretraining is)."""
REGENERATE = "regenerate the tiny CLIPs with make demo-pretrain"


def state_dict_sha256(state_dict: Mapping[str, torch.Tensor]) -> str:
    """SHA-256 of a state dict's content: each key in sorted order with its dtype, shape and raw bytes."""
    digest = hashlib.sha256()
    for key in sorted(state_dict):
        tensor = state_dict[key].detach().cpu().contiguous()
        digest.update(f"{key}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _encode(name: str, tensor: torch.Tensor, storage: str) -> dict[str, torch.Tensor]:
    """The stored form of one tensor at ``storage`` precision (integer tensors as they are)."""
    if not tensor.is_floating_point() or storage == "float32":
        return {name: tensor.contiguous()}
    if storage == "float16" or tensor.ndim < 2:
        return {name: tensor.to(torch.float16).contiguous()}
    rows = tensor.float().reshape(tensor.shape[0], -1)
    scale = rows.abs().amax(dim=1) / 127
    divisor = torch.where(scale > 0, scale, torch.ones_like(scale))
    quantised = torch.round(rows / divisor[:, None]).clamp(-127, 127).to(torch.int8)
    return {name + INT8: quantised.reshape(tensor.shape).contiguous(), name + SCALE: scale.contiguous()}


def _decode(stored: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The float32 tensors (integer ones as they are) that stored tensors stand for (inverse of ``_encode``)."""
    decoded = {}
    for name, tensor in stored.items():
        if name.endswith(SCALE):
            continue
        if name.endswith(INT8):
            base = name.removesuffix(INT8)
            scale = stored[base + SCALE]
            decoded[base] = tensor.float() * scale.view(-1, *[1] * (tensor.ndim - 1))
        else:
            decoded[name] = tensor.float() if tensor.is_floating_point() else tensor
    return decoded


def pack(state_dict: Mapping[str, torch.Tensor], spec: TinyClipSpec, seed: int, storage: str
         ) -> dict[str, torch.Tensor]:
    """The tensors a compact file stores for a tiny CLIP pretrained from ``seed``: the embedding rows that differ from
    the initial ones (with their ids) instead of the whole embedding, each tensor at ``storage`` precision."""
    if storage not in STORAGES:
        raise ValueError(f"unknown storage {storage!r}; expected one of {STORAGES}")
    initial = initial_model(spec, seed).state_dict()[EMBEDDING]
    weight = state_dict[EMBEDDING]
    ids = (weight != initial).any(dim=1).nonzero().flatten()
    compact = {key: value for key, value in state_dict.items() if key != EMBEDDING}
    compact.update({IDS: ids, ROWS: weight[ids]})
    stored = {}
    for name, tensor in compact.items():
        stored.update(_encode(name, tensor, storage))
    return stored


def expand(stored: Mapping[str, torch.Tensor], spec: TinyClipSpec, seed: int) -> dict[str, torch.Tensor]:
    """The float32 state dict of stored tensors: decoded, with the embedding rows not stored rebuilt from ``seed``."""
    state_dict = _decode(stored)
    ids, rows = state_dict.pop(IDS), state_dict.pop(ROWS)
    weight = initial_model(spec, seed).state_dict()[EMBEDDING].detach().clone()
    weight[ids] = rows
    state_dict[EMBEDDING] = weight
    return state_dict


def write_compact(path: str, state_dict: Mapping[str, torch.Tensor], params: PretrainParams, storage: str) -> str:
    """Write the compact file of a tiny CLIP pretrained with ``params`` atomically; returns the SHA-256 of the state
    dict it expands to (recorded in the file)."""
    spec = SPECS[params.size]
    stored = pack(state_dict, spec, params.seed, storage)
    expanded = state_dict_sha256(expand(stored, spec, params.seed))
    record = {"format": FORMAT, "storage": storage, "seed": params.seed, "spec": asdict(spec), "params": asdict(params),
              "expanded_sha256": expanded, "torch": torch.__version__}
    data = safetensors_bytes(stored, {METADATA_KEY: json.dumps(record, sort_keys=True)})
    atomic_write(path, lambda f: f.write(data), binary=True)
    return expanded


def read_record(path: str) -> dict:
    """The record of a compact file (checked to be one, tensors not read); one-line errors for anything else."""
    return _open(path, tensors=False)[1]


def _open(path: str, tensors: bool = True) -> tuple[dict[str, torch.Tensor], dict]:
    """A compact file's stored tensors (``tensors``) and its record."""
    try:
        with safe_open(path, framework="pt") as f:
            text = (f.metadata() or {}).get(METADATA_KEY, "{}")
            stored = {name: f.get_tensor(name) for name in f.keys()} if tensors else {}
    except (OSError, SafetensorError) as e:
        raise CorruptFileError(f"{path} is not a readable safetensors file ({first_line(e)[:160]}); "
                               f"{REGENERATE}") from None
    try:
        record = json.loads(text)
    except ValueError:
        record = None
    if not (isinstance(record, dict) and record.get("format") == FORMAT
            and isinstance(record.get("expanded_sha256"), str)):
        raise CorruptFileError(f"{path} is not a compact tiny-CLIP file (no {FORMAT} record in its metadata); "
                               f"{REGENERATE}")
    return stored, record


def read_compact(path: str) -> dict[str, torch.Tensor]:
    """The float32 state dict (OpenAI key names) a compact file expands to, checked against the SHA-256 it records."""
    stored, record = _open(path)
    try:
        state_dict = expand(stored, TinyClipSpec(**record["spec"]), int(record["seed"]))
    except (KeyError, TypeError, ValueError, RuntimeError, IndexError) as e:
        raise CorruptFileError(f"{path} does not expand to a tiny CLIP ({type(e).__name__}: {first_line(e)[:160]}); "
                               f"{REGENERATE}") from None
    if state_dict_sha256(state_dict) != record.get("expanded_sha256"):
        raise InvalidInputError(f"{path} expands to weights whose SHA-256 differs from the one it records: the file "
                                f"is damaged, or this torch ({torch.__version__}) draws other initial weights than the "
                                f"one that wrote it ({record.get('torch')}); {REGENERATE}")
    return state_dict


def trained_rows() -> int:
    """How many token-embedding rows pretraining trains: the distinct tokens of its captions."""
    return len(torch.unique(caption_tokens()))


def stored_bytes(spec: TinyClipSpec, storage: str, rows: int) -> int:
    """Bytes of the tensors a compact file of ``spec`` stores with ``rows`` trained embedding rows (its header aside),
    from the shapes alone (the model is built on the meta device: no weights, no random draws)."""
    with torch.device("meta"):
        shapes = build_open_clip(spec).state_dict()
        width = shapes[EMBEDDING].shape[1]
        compact = {key: value for key, value in shapes.items() if key != EMBEDDING}
        compact.update({IDS: torch.empty(rows, dtype=torch.int64), ROWS: torch.empty(rows, width)})
        stored = [t for name, tensor in compact.items() for t in _encode(name, tensor, storage).values()]
    return sum(t.numel() * t.element_size() for t in stored)


def fitting_storage(specs: Sequence[TinyClipSpec], limit: int, rows: int) -> str:
    """The most precise storage whose files for ``specs`` take at most ``limit`` bytes together (headers included as
    ``HEADER_ALLOWANCE`` each)."""
    for storage in STORAGES:
        if sum(stored_bytes(spec, storage, rows) + HEADER_ALLOWANCE for spec in specs) <= limit:
            return storage
    raise ValueError(f"the tiny CLIPs {specs} do not fit {limit} bytes even as {STORAGES[-1]}")
