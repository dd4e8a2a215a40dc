#!/usr/bin/env python3
"""YaRN RoPE parity with HF transformers (GPU machine, where transformers 5.17 is installed; CPU only).

For configs/qwen3-30b-a3b-128k (Qwen3-MoE, the published 128K YaRN setting) and a Llama-family
variant of it, compares our inv_freq, cos/sin multiplier and cos/sin rows (from
dist/scripts/gpu/yarn_dump.js, the table the CPU and CUDA backends rotate with) against HF's
ROPE_INIT_FUNCTIONS["yarn"] and the model's own rotary embedding class in fp32, and our derived
max model length against original_max_position_embeddings * factor (vLLM's rule).
Prints one PASS/FAIL line per config; exit 0 iff all pass.

usage: python3 scripts/gpu/yarn_parity.py [--node node]
"""
import argparse, json, os, shutil, subprocess, sys, tempfile
import torch
from transformers import AutoConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

POSITIONS = [0, 1, 4097, 32768, 40960, 131071]


def rotary_class(cfg):
    """The model's rotary embedding class (Qwen3MoeRotaryEmbedding, LlamaRotaryEmbedding)."""
    if cfg.model_type == "qwen3_moe":
        from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeRotaryEmbedding as C
    else:
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding as C
    return C(cfg)


def check(name, folder, node):
    ours = json.loads(subprocess.check_output(
        [node, "dist/scripts/gpu/yarn_dump.js", folder, *map(str, POSITIONS)], text=True))
    cfg = AutoConfig.from_pretrained(folder)
    inv, att = ROPE_INIT_FUNCTIONS["yarn"](cfg, "cpu")
    emb = rotary_class(cfg)
    pos = torch.tensor([POSITIONS])
    x = torch.zeros(1, len(POSITIONS), 8, dtype=torch.float32)
    cos, sin = emb(x, pos)  # [1, P, dim] each, halves repeated
    half = ours["rotaryDim"] // 2
    hf_rows = torch.cat([cos[0, :, :half], sin[0, :, :half]], dim=-1)
    our_inv = torch.tensor(ours["invFreq"], dtype=torch.float32)
    our_rows = torch.tensor(ours["cosSin"], dtype=torch.float32)
    d_inv = ((our_inv - inv.float()).abs() / inv.float().abs()).max().item()
    d_att = abs(ours["attentionFactor"] - float(att))
    d_rows = (our_rows - hf_rows.float()).abs().max().item()
    rs = cfg.rope_parameters if getattr(cfg, "rope_parameters", None) else cfg.rope_scaling
    want_len = int(rs["original_max_position_embeddings"] * rs["factor"])
    ok = d_inv <= 1e-6 and d_att <= 1e-6 and d_rows <= 2e-5 and ours["derivedMaxModelLen"] == want_len
    print(f"{'PASS' if ok else 'FAIL'} {name}: inv_freq max rel diff {d_inv:.2e}, attention factor "
          f"{ours['attentionFactor']:.7f} vs HF {float(att):.7f}, cos/sin max abs diff {d_rows:.2e} at "
          f"positions {POSITIONS}, max_model_len {ours['derivedMaxModelLen']} (want {want_len})")
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--node", default="node")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp()
    try:
        llama = os.path.join(tmp, "llama-yarn")
        os.makedirs(llama)
        c = json.load(open("configs/llama-3.1-8b/config.json"))
        c["rope_scaling"] = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 8192,
                             "beta_fast": 16, "beta_slow": 2}
        c["max_position_embeddings"] = 65536
        json.dump(c, open(os.path.join(llama, "config.json"), "w"))
        results = [check("qwen3-30b-a3b-128k", "configs/qwen3-30b-a3b-128k", a.node),
                   check("llama-3.1-8b yarn x8 beta 16/2", llama, a.node)]
    finally:
        shutil.rmtree(tmp)
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
