"""Minimal safetensors reader/writer (no external package).

File layout: 8-byte little-endian header length N, N bytes of JSON header
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
then the raw little-endian tensor bytes. bf16 is handled by viewing int16 storage.
"""
import json
import struct

import numpy as np
import torch

_DTYPES = {
    "F32": (torch.float32, 4),
    "F64": (torch.float64, 8),
    "F16": (torch.float16, 2),
    "BF16": (torch.bfloat16, 2),
    "I64": (torch.int64, 8),
    "I32": (torch.int32, 4),
    "I16": (torch.int16, 2),
    "I8": (torch.int8, 1),
    "U8": (torch.uint8, 1),
}
_NAMES = {v[0]: k for k, v in _DTYPES.items()}


def _to_bytes(t):
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().astype("<i2").tobytes()
    return t.numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes()


def save_file(tensors, path, metadata=None):
    """tensors: dict name -> torch.Tensor (dtype kept as given)."""
    header = {}
    blobs = []
    off = 0
    for name in sorted(tensors):
        t = tensors[name]
        b = _to_bytes(t)
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)  # align data to 8 bytes
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def load_file(path):
    """Returns dict name -> torch.Tensor in the stored dtype."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt, size = _DTYPES[info["dtype"]]
        b, e = info["data_offsets"]
        raw = data[base + b: base + e]
        if dt == torch.bfloat16:
            arr = np.frombuffer(raw, dtype="<i2").copy()
            t = torch.from_numpy(arr).view(torch.bfloat16)
        else:
            npdt = torch.empty(0, dtype=dt).numpy().dtype.newbyteorder("<")
            t = torch.from_numpy(np.frombuffer(raw, dtype=npdt).copy())
        out[name] = t.reshape(info["shape"])
    return out


def load_dir(model_dir):
    """Loads model.safetensors or the shards named by model.safetensors.index.json."""
    import os
    idx = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        out = {}
        for s in shards:
            out.update(load_file(os.path.join(model_dir, s)))
        return out
    return load_file(os.path.join(model_dir, "model.safetensors"))
