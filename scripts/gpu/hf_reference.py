#!/usr/bin/env python3
"""HF transformers references for the CUDA backend checks (GPU machine; torch + transformers there).

For each model: a random-weight checkpoint built from a config (`AutoModelForCausalLM.from_config`,
seeded, saved with `save_pretrained(safe_serialization=True)`), or a trained reference model
directory; then, for three seeded random prompts, HF's last-position logits in bf16 and in fp32
and HF's greedy continuation (bf16 and fp32) with its top-2 logit gaps. Writes
<out>/<name>/ (the checkpoint, for random models) and <out>/<name>.json (the references).

usage: python3 scripts/gpu/hf_reference.py --out /tmp/hfref [--layers 2] [--tokens 32] [--ref models/ref-small ...]
"""
import argparse, json, os, sys, time
import torch
from transformers import AutoConfig, AutoModelForCausalLM

RANDOM_MODELS = {  # name -> config.json folder in the repo
    "llama-3.1-8b": "configs/llama-3.1-8b",
    "qwen2.5-7b": "configs/qwen2.5-7b",
    "qwen3-8b": "configs/qwen3-8b",
    "mistral-7b": "configs/mistral-7b",
}
PROMPT_LENS = [7, 33, 100]


def greedy(model, ids, n):
    """Greedy decode with HF's cache; returns (tokens, top-2 gaps of each step's logits)."""
    out, gaps = [], []
    with torch.no_grad():
        res = model(input_ids=ids, use_cache=True)
        past = res.past_key_values
        logits = res.logits[:, -1].float()
        for _ in range(n):
            top = torch.topk(logits[0], 2)
            gaps.append(float(top.values[0] - top.values[1]))
            nxt = int(torch.argmax(logits[0]))
            out.append(nxt)
            res = model(input_ids=torch.tensor([[nxt]], device=ids.device), past_key_values=past, use_cache=True)
            past = res.past_key_values
            logits = res.logits[:, -1].float()
    return out, gaps


def references(name, model_dir, vocab, tokens, seed=0):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, min(vocab, 32000), (n,), generator=g).tolist() for n in PROMPT_LENS]
    cases = [{"input_ids": p} for p in prompts]
    for dtype, tag in ((torch.bfloat16, "bf16"), (torch.float32, "fp32")):
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).cuda().eval()
        for c in cases:
            ids = torch.tensor([c["input_ids"]], device="cuda")
            with torch.no_grad():
                logits = model(input_ids=ids).logits[0, -1].float().cpu()
            c[f"last_logits_{tag}"] = logits.tolist()
            c[f"greedy_{tag}"], c[f"gaps_{tag}"] = greedy(model, ids, tokens)
        del model
        torch.cuda.empty_cache()
    return {"name": name, "dir": os.path.abspath(model_dir), "cases": cases}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--ref", nargs="*", default=[])
    ap.add_argument("--only", nargs="*", default=None)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    names = a.only if a.only is not None else list(RANDOM_MODELS)
    for name in names:
        t0 = time.time()
        cfg = AutoConfig.from_pretrained(RANDOM_MODELS[name])
        cfg.num_hidden_layers = a.layers
        if getattr(cfg, "layer_types", None) is not None:  # Qwen2/3: one entry per layer
            cfg.layer_types = cfg.layer_types[: a.layers]
        torch.manual_seed(0)
        with torch.device("cuda"):  # random init on the GPU: seconds instead of a minute
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
        d = os.path.join(a.out, name)
        model.save_pretrained(d, safe_serialization=True)
        del model
        ref = references(name, d, cfg.vocab_size, a.tokens)
        json.dump(ref, open(os.path.join(a.out, name + ".json"), "w"))
        print(f"{name}: {a.layers} layers, saved and referenced in {time.time() - t0:.1f}s", flush=True)
    for d in a.ref:
        name = os.path.basename(os.path.normpath(d))
        cfg = AutoConfig.from_pretrained(d)
        ref = references(name, d, cfg.vocab_size, a.tokens)
        json.dump(ref, open(os.path.join(a.out, name + ".json"), "w"))
        print(f"{name}: referenced", flush=True)


if __name__ == "__main__":
    sys.exit(main())
