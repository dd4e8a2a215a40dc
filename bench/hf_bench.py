#!/usr/bin/env python3
"""HF transformers side by side with bench/cuda_bench.ts (GPU machine).

Random-weight model from a config (bf16, sdpa attention, on the GPU), measured like ours:
- decode tokens/s at batch B with a C-token prompt: time of `generate(max_new_tokens=N,
  min_new_tokens=N)` minus the time of the prefill alone, over B*(N-1) tokens;
- prefill tokens/s of one 8K prompt (forward with logits_to_keep=1).
usage: python3 bench/hf_bench.py --config configs/llama-3.1-8b [--batches 1,32] [--context 1024] [--json FILE]
"""
import argparse, json, time
import torch
from transformers import AutoConfig, AutoModelForCausalLM


def timed(fn, reps=1):
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        out = fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / reps, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="configs/llama-3.1-8b")
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--prefill", type=int, default=8192)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    cfg = AutoConfig.from_pretrained(a.config)
    torch.manual_seed(0)
    t0 = time.perf_counter()
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa").eval()
    print(f"HF {cfg.architectures[0]} random init on GPU in {time.perf_counter() - t0:.1f}s", flush=True)
    res = {"transformers_decode": [], "transformers_prefill": None}
    g = torch.Generator(device="cuda").manual_seed(0)
    with torch.no_grad():
        for B in [int(x) for x in a.batches.split(",")]:
            ids = torch.randint(0, 32000, (B, a.context), device="cuda", generator=g)
            N = a.new_tokens
            gen = lambda: model.generate(ids, max_new_tokens=N, min_new_tokens=N, do_sample=False, pad_token_id=0)
            pre = lambda: model(input_ids=ids, logits_to_keep=1)
            timed(gen)  # warm-up
            t_pre, _ = timed(pre, 3)
            t_gen, _ = timed(gen)
            tok_s = B * (N - 1) / (t_gen - t_pre)
            res["transformers_decode"].append({"batch": B, "context": a.context, "tokens_per_s": tok_s,
                                               "step_ms": 1000 * (t_gen - t_pre) / (N - 1)})
            print(f"HF decode batch {B} ctx {a.context}: {tok_s:.0f} tok/s ({1000 * (t_gen - t_pre) / (N - 1):.2f} ms/step)", flush=True)
        ids = torch.randint(0, 32000, (1, a.prefill), device="cuda", generator=g)
        pre = lambda: model(input_ids=ids, logits_to_keep=1)
        timed(pre)
        t, _ = timed(pre, 3)
        res["transformers_prefill"] = {"tokens": a.prefill, "seconds": t, "tokens_per_s": a.prefill / t}
        print(f"HF prefill {a.prefill}: {a.prefill / t:.0f} tok/s ({t:.3f} s)", flush=True)
    if a.json:
        json.dump(res, open(a.json, "w"), indent=2)


if __name__ == "__main__":
    main()
