#!/usr/bin/env python3
"""Tiny random checkpoints and their HF reference fixtures (GPU machine: torch + transformers 5.17).

Builds a model from a config with `AutoModelForCausalLM.from_config` (seeded), saves it in bf16
with `save_pretrained` (or, with --packed, the in-memory state dict as it is, so MoE experts stay
in transformers 5's packed `mlp.experts.gate_up_proj` / `down_proj` form), copies a tokenizer,
and writes the fixture JSON in the format of ../shared/fixtures/hf-tiny-*.json:

  {"model": NAME, "architecture": [ARCH], "reference": "...",
   "cases": [{"input_ids": [...], "greedy_ids": [...], "last_logits": [...]}, ...]}

References are computed from the bf16-saved weights loaded back in fp32, TF32 off, by full forward
passes without a KV cache (greedy: one full pass per generated token); logits rounded to 5
decimals as the shared fixtures are.

usage:
  python3 scripts/gpu/make_tiny_fixture.py --name tiny-qwen3-moe --out-models /tmp/tiny \\
      --out-fixtures /tmp/tiny [--preset P | --config FILE] [--vocab-size 512] [--packed] \\
      [--tokenizer-from models/ref-small] [--lengths 7,40,300] [--tokens 24] [--seed 0]

The shape is --preset (default: --name) from PRESETS below (the shapes of
../shared/models/tiny-*, plus a group-limited router) unless --config gives a config.json.
--vocab-size shrinks the vocabulary (and drops the tokenizer), which makes a checkpoint small
enough to keep in the repo under test/fixtures/models/ (vocab 512: about 2 MB).
Prints one line per model: "<name>: <params> parameters, <bytes> bytes of safetensors, <s>s".
"""
import argparse, json, os, shutil, sys, time
import torch
from transformers import AutoConfig, AutoModelForCausalLM

COMMON = dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
              intermediate_size=256, max_position_embeddings=4096, vocab_size=16384, rms_norm_eps=1e-5,
              tie_word_embeddings=False, bos_token_id=0, eos_token_id=0, hidden_act="silu")
PRESETS = {
    "tiny-qwen3-moe": dict(COMMON, model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"], num_experts=8,
                           num_experts_per_tok=2, moe_intermediate_size=64, norm_topk_prob=True,
                           decoder_sparse_step=1, mlp_only_layers=[]),
    "tiny-glm4-moe": dict(COMMON, model_type="glm4_moe", architectures=["Glm4MoeForCausalLM"], n_routed_experts=8,
                          n_shared_experts=1, num_experts_per_tok=2, moe_intermediate_size=64, norm_topk_prob=True,
                          first_k_dense_replace=1, n_group=1, topk_group=1, routed_scaling_factor=1.0,
                          partial_rotary_factor=0.5, use_qk_norm=True, attention_bias=True),
    # Group-limited routing with a nonzero correction bias (the tiny checkpoints above have
    # n_group 1 and a zero bias): 16 experts in 4 groups, 2 groups per token.
    "tiny-glm4-moe-grouped": dict(COMMON, model_type="glm4_moe", architectures=["Glm4MoeForCausalLM"],
                                  n_routed_experts=16, n_shared_experts=1, num_experts_per_tok=4,
                                  moe_intermediate_size=32, norm_topk_prob=True, first_k_dense_replace=1, n_group=4,
                                  topk_group=2, routed_scaling_factor=2.5, partial_rotary_factor=0.5,
                                  use_qk_norm=True, attention_bias=True),
}
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json"]


def build(name, cfg_dict, out_dir, packed, seed):
    """Random bf16 model from the config, saved to out_dir; returns (config, the model in memory)."""
    cfg_dict = dict(cfg_dict)
    if "model_type" not in cfg_dict:
        sys.exit(f"{name}: the config needs a model_type")
    cfg = AutoConfig.for_model(cfg_dict.pop("model_type"), **cfg_dict)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    with torch.no_grad():  # a nonzero noaux_tc correction bias, so the selection depends on it
        for mod in model.modules():
            bias = getattr(mod, "e_score_correction_bias", None)
            if isinstance(bias, torch.Tensor):
                bias.copy_(torch.randn(bias.shape, generator=torch.Generator().manual_seed(seed + 1)) * 0.05)
    os.makedirs(out_dir, exist_ok=True)
    if packed:
        from safetensors.torch import save_file
        cfg.save_pretrained(out_dir)
        state = {k: v.contiguous() for k, v in model.state_dict().items()}
        save_file(state, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    else:
        model.save_pretrained(out_dir, safe_serialization=True)
    return cfg, model


def load_fp32(model_dir, in_memory):
    """The saved checkpoint loaded back in fp32, checked tensor by tensor against the model that
    was saved (a checkpoint form HF would not map back gets random-initialised weights, silently);
    on any difference, the in-memory model in fp32 (the same bf16 values) instead."""
    reloaded = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    mem = in_memory.state_dict()
    got = reloaded.state_dict()
    same = mem.keys() == got.keys() and all(torch.equal(mem[k].float(), got[k].float()) for k in mem)
    if same:
        return reloaded
    print(f"{model_dir}: from_pretrained does not give back the saved tensors; references from the in-memory model", flush=True)
    return in_memory.float()


def references(model, vocab, lengths, tokens, seed):
    """fp32 references of the saved bf16 weights: last logits and greedy ids without a KV cache."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model = model.cuda().eval()
    g = torch.Generator().manual_seed(seed)
    cases = []
    for n in lengths:
        ids = torch.randint(0, vocab, (n,), generator=g).tolist()
        seq = list(ids)
        greedy, last = [], None
        with torch.no_grad():
            for step in range(tokens):
                logits = model(input_ids=torch.tensor([seq], device="cuda"), use_cache=False).logits[0, -1].float()
                if step == 0:
                    last = [round(float(x), 5) for x in logits.cpu()]
                nxt = int(torch.argmax(logits))
                greedy.append(nxt)
                seq.append(nxt)
        cases.append({"input_ids": ids, "greedy_ids": greedy, "last_logits": last})
    return cases


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", required=True)
    ap.add_argument("--preset", help="a PRESETS entry (default: --name)")
    ap.add_argument("--config", help="a config.json instead of a preset")
    ap.add_argument("--out-models", required=True)
    ap.add_argument("--out-fixtures", required=True)
    ap.add_argument("--vocab-size", type=int)
    ap.add_argument("--packed", action="store_true", help="keep transformers 5's packed expert tensors")
    ap.add_argument("--tokenizer-from", default="models/ref-small")
    ap.add_argument("--lengths", default="7,40,300")
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    t0 = time.time()
    if a.config is not None:
        cfg_dict = json.load(open(a.config))
    elif (a.preset or a.name) in PRESETS:
        cfg_dict = dict(PRESETS[a.preset or a.name])
    else:
        sys.exit(f"no preset {a.preset or a.name} (presets: {', '.join(PRESETS)}); give --config")
    if a.vocab_size is not None:
        cfg_dict["vocab_size"] = a.vocab_size
    model_dir = os.path.join(a.out_models, a.name)
    cfg, in_memory = build(a.name, cfg_dict, model_dir, a.packed, a.seed)
    if a.vocab_size is None:
        for f in TOKENIZER_FILES:
            src = os.path.join(a.tokenizer_from, f)
            if os.path.exists(src):
                shutil.copy(src, model_dir)
    lengths = [int(x) for x in a.lengths.split(",")]
    model = load_fp32(model_dir, in_memory)
    params = sum(p.numel() for p in model.parameters())
    cases = references(model, cfg.vocab_size, lengths, a.tokens, a.seed)
    arch = cfg.architectures[0]
    import transformers
    fixture = {
        "model": a.name,
        "architecture": [arch],
        "reference": f"transformers {transformers.__version__} {arch} fp32 (bf16-saved weights), TF32 off, greedy without KV cache",
        "cases": cases,
    }
    os.makedirs(a.out_fixtures, exist_ok=True)
    with open(os.path.join(a.out_fixtures, f"hf-{a.name}.json"), "w") as f:
        json.dump(fixture, f)
    size = sum(os.path.getsize(os.path.join(model_dir, x)) for x in os.listdir(model_dir) if x.endswith(".safetensors"))
    print(f"{a.name}: {params} parameters, {size} bytes of safetensors, {time.time() - t0:.1f}s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
