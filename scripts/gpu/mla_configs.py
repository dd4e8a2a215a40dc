#!/usr/bin/env python3
"""Checks configs/glm-5 and configs/deepseek-v3.2 against transformers' class defaults, and makes
a tiny GLM-5 checkpoint with "shared" indexer layers and its HF fixture (GPU machine: torch and
transformers 5.17 there; seconds on the CPU of that machine).

1. `GlmMoeDsaConfig()` and `DeepseekV32Config()` -> to_dict(); every key the committed
   config.json files hold is compared (lists and dicts by value); prints one line per model,
   "OK" or the keys that differ, and writes the regenerated files to <out>/.
2. With --shared-fixture: tiny-glm5-dsa's config (test/fixtures/models/tiny-glm5-dsa-pv with
   its 16384-token vocabulary back) with indexer_types [full, shared, full, shared], random
   weights (seed 0), saved in bf16 to <out>/tiny-glm5-dsa-shared/ (with ref-small's tokenizer, as
   the other tiny models), and <out>/hf-tiny-glm5-dsa-shared.json
   in the format of ../shared/fixtures/hf-tiny-*.json: for prompts of 7, 40 and 300 random ids,
   the fp32 last-position logits and 24 greedy tokens by full forwards without a cache (TF32
   off). Copy both next to the other tiny models; test/unit/models/mla_hf_reference.test.ts and
   test/e2e/engine/mla_generate.test.ts pick the model up by name.

usage: python3 scripts/gpu/mla_configs.py --out $OUT [--shared-fixture]
"""
import argparse, json, os, shutil, sys

import torch
from transformers import AutoModelForCausalLM, DeepseekV32Config, GlmMoeDsaConfig

CONFIGS = {"glm-5": GlmMoeDsaConfig, "deepseek-v3.2": DeepseekV32Config}
IGNORED = {"transformers_version"}


def check_configs(out):
    ok = True
    for name, cls in CONFIGS.items():
        want = cls().to_dict()
        with open(f"configs/{name}/config.json") as f:
            have = json.load(f)
        diff = [k for k in have if k not in IGNORED and have[k] != want.get(k, "<absent>")]
        extra = [k for k in want if k not in have and not k.startswith("_")]
        print(f"{name}: {'OK' if not diff else 'DIFFERENT ' + ', '.join(f'{k}: ours {have[k]!r} vs HF {want.get(k)!r}' for k in diff)}"
              + (f" (HF keys not in ours: {', '.join(extra)})" if extra else ""))
        ok = ok and not diff
        with open(os.path.join(out, f"{name}.config.json"), "w") as f:
            json.dump(want, f, indent=2, sort_keys=True, default=str)
    return ok


def shared_fixture(out):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    with open("test/fixtures/models/tiny-glm5-dsa-pv/config.json") as f:
        cfg = json.load(f)
    cfg["vocab_size"] = 16384
    cfg["indexer_types"] = ["full", "shared", "full", "shared"]
    src = "models/ref-small"
    derived = ("architectures", "model_type", "transformers_version", "qk_head_dim")  # set by the class
    config = GlmMoeDsaConfig(**{k: v for k, v in cfg.items() if k not in derived})
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    name = "tiny-glm5-dsa-shared"
    dst = os.path.join(out, name)
    model.save_pretrained(dst, safe_serialization=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        if os.path.exists(os.path.join(src, f)):
            shutil.copy(os.path.join(src, f), dst)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(dst, dtype=torch.float32).to(dev).eval()
    gen = torch.Generator().manual_seed(1)
    cases = []
    with torch.no_grad():
        for n in (7, 40, 300):
            ids = torch.randint(0, config.vocab_size, (n,), generator=gen).tolist()
            seq, greedy, last = list(ids), [], None
            for step in range(24):
                logits = model(input_ids=torch.tensor([seq], device=dev), use_cache=False).logits[0, -1].float()
                if step == 0:
                    last = logits.cpu().tolist()
                nxt = int(torch.argmax(logits))
                greedy.append(nxt)
                seq.append(nxt)
            cases.append({"input_ids": ids, "greedy_ids": greedy, "last_logits": last})
    fixture = {
        "model": name,
        "architecture": ["GlmMoeDsaForCausalLM"],
        "reference": "transformers %s GlmMoeDsaForCausalLM fp32 (bf16-saved weights), TF32 off, greedy without KV cache"
        % __import__("transformers").__version__,
        "cases": cases,
    }
    with open(os.path.join(out, f"hf-{name}.json"), "w") as f:
        json.dump(fixture, f)
    print(f"{name}: saved to {dst} and {out}/hf-{name}.json ({len(cases)} cases)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--shared-fixture", action="store_true", help="also make tiny-glm5-dsa-shared and its fixture")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    ok = check_configs(a.out)
    if a.shared_fixture:
        shared_fixture(a.out)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
