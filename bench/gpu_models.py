"""The models of a GPU check, written on the machine itself (nothing is downloaded there).

* The tiny test set (``llamaspec.testing.write_all``): target, 2-layer draft, DFlash and DSpark heads.
* A random-weight ``qwen3`` target of a real model's layer shape in Q4_K_M, and a 2-layer draft that shares
  its embeddings, head and first two blocks. Speed does not depend on the weights' values, so the target is
  *assembled*: only a 2-layer F32 template is drawn (``testing.write_target``) and quantized with llama.cpp's
  Q4_K_M (``llamaspec.quantize``); that 2-layer file is the draft, and the target's N blocks are byte copies
  of the template's two blocks, each tensor taking the type llama.cpp's Q4_K_M gives it at that depth
  (``attn_v`` / ``ffn_down`` in Q6_K where ``use_more_bits(i, N)``, llama-quant.cpp; the template has one
  block of each kind). Drawing and quantizing all N blocks instead would cost N/2 times as much: 8 B
  parameters in F32 are 32 GB of random numbers drawn by one core, minutes more than the run has.

The vocabulary is the tiny test one (384 tokens), so the output head costs almost nothing: the model is the
real one minus its embedding and output head (1.2 B of Qwen3-8B's 8.2 B parameters; its 36 blocks hold 6.9 B).
Measured on 2 cores (8b): 8.7 s to draw the template, 15.9 s to quantize it, 4.7 s to write the 3.9 GiB target.

    python bench/gpu_models.py OUTDIR [--shape 8b|4b|small|tiny]   # writes and times them
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import llamaspec
from llamaspec import testing

# Layer shapes (the vocabulary is always the tiny one). 8b / 4b: Qwen3-8B / Qwen3-4B's config.json.
SHAPES = {
    "8b": dict(n_layer=36, n_embd=4096, n_head=32, n_head_kv=8, head_dim=128, n_ff=12288),
    "4b": dict(n_layer=36, n_embd=2560, n_head=32, n_head_kv=8, head_dim=128, n_ff=9728),
    "small": dict(n_layer=6, n_embd=512, n_head=8, n_head_kv=4, head_dim=64, n_ff=1536),  # the CPU dry run
    "tiny": dict(n_layer=3, n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=512),  # tests/test_gpu_check.py
}
TEMPLATE_LAYERS = 2
MANIFEST = "models.json"


def use_more_bits(i_layer: int, n_layers: int) -> bool:
    """llama-quant.cpp: the blocks whose attn_v / ffn_down Q4_K_M stores in Q6_K."""
    return i_layer < n_layers // 8 or i_layer >= 7 * n_layers // 8 or (i_layer - n_layers // 8) % 3 == 2


def block_params(shape: dict) -> int:
    e, q, kv, ff = shape["n_embd"], shape["n_head"] * shape["head_dim"], shape["n_head_kv"] * shape["head_dim"], \
        shape["n_ff"]
    return 2 * e * q + 2 * e * kv + 3 * e * ff


def write_tiny(folder: Path) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    testing.write_all(folder)
    return {name: str(folder / f"{name}.gguf") for name in ("target", "draft_simple", "dflash", "dspark")}


def write_template(folder: Path, shape: dict, threads: int) -> tuple[Path, dict]:
    """The 2-layer F32 template, quantized to Q4_K_M: the draft. Returns its path and the stage seconds."""
    f32, draft = folder / "template-f32.gguf", folder / "draft-q4_k_m.gguf"
    t0 = time.perf_counter()
    testing.write_target(f32, seed=0, n_ctx_train=4096, name="random-qwen3-draft",
                         **{**shape, "n_layer": TEMPLATE_LAYERS})
    t1 = time.perf_counter()
    llamaspec.quantize(f32, draft, "Q4_K_M", threads)
    t2 = time.perf_counter()
    f32.unlink()
    return draft, {"template_f32_write": t1 - t0, "template_quantize": t2 - t1}


def assemble(template: Path, out: Path, n_layer: int, name: str) -> dict:
    """The N-block target from the template's two blocks (see the module docstring). Returns tensor counts by type."""
    gguf = testing.gguf
    reader = gguf.GGUFReader(os.fspath(template))
    arch = reader.get_field("general.architecture").contents()
    writer = gguf.GGUFWriter(os.fspath(out), arch)
    for field in reader.fields.values():
        if field.name == "general.architecture" or field.name.startswith("GGUF."):
            continue
        vtype = field.types[0]
        value = field.contents()
        if field.name == f"{arch}.block_count":
            value = n_layer
        elif field.name == "general.name":
            value = name
        writer.add_key_value(field.name, value, vtype,
                             sub_type=field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None)

    blocks: dict[int, dict] = {}
    plan = []
    for t in reader.tensors:
        if t.name.startswith("blk."):
            _, layer, rest = t.name.split(".", 2)
            blocks.setdefault(int(layer), {})[rest] = t
        else:
            plan.append((t.name, t))
    for i in range(n_layer):
        for rest in blocks[0]:
            source = i % TEMPLATE_LAYERS  # blocks 0 and 1 are the draft's, as they are
            if i >= TEMPLATE_LAYERS and rest in ("attn_v.weight", "ffn_down.weight"):
                want = "Q6_K" if use_more_bits(i, n_layer) else "Q4_K"
                source = next((j for j in sorted(blocks) if blocks[j][rest].tensor_type.name == want), source)
            plan.append((f"blk.{i}.{rest}", blocks[source][rest]))
    types: dict[str, int] = {}
    for name_, t in plan:
        writer.add_tensor_info(name_, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for _, t in plan:
        writer.write_tensor_data(t.data)
    writer.close()
    return types


def write_large(folder: Path, shape_name: str, threads: int) -> dict:
    shape = SHAPES[shape_name]
    folder.mkdir(parents=True, exist_ok=True)
    draft, seconds = write_template(folder, shape, threads)
    target = folder / "target-q4_k_m.gguf"
    t0 = time.perf_counter()
    types = assemble(draft, target, shape["n_layer"], f"random-qwen3-{shape_name}-shape")
    seconds["assemble"] = time.perf_counter() - t0
    n_params = shape["n_layer"] * block_params(shape)
    return {"shape_name": shape_name, "shape": shape, "target": str(target), "draft": str(draft),
            "block_params": n_params, "target_bytes": target.stat().st_size, "draft_bytes": draft.stat().st_size,
            "tensor_types": types, "seconds": seconds}


def write_models(folder: Path, shape_name: str, threads: int) -> dict:
    """Tiny set + large target and draft into ``folder``; the manifest, also saved as folder/models.json: first
    with the tiny set alone (the lossless part needs nothing else), then with the large model."""
    t0 = time.perf_counter()
    folder.mkdir(parents=True, exist_ok=True)
    manifest = {"tiny": write_tiny(folder / "tiny"), "large": None}
    manifest["tiny_seconds"] = time.perf_counter() - t0
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1))
    manifest["large"] = write_large(folder / "large", shape_name, threads)
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest


def read_manifest(folder: Path) -> dict:
    path = Path(folder) / MANIFEST
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: the models part did not write the tiny models")
    return json.loads(path.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--shape", default="small", choices=sorted(SHAPES))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    print(json.dumps(write_models(Path(args.outdir), args.shape, args.threads), indent=1))


if __name__ == "__main__":
    main()
