import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  activationBytesPerToken,
  MIN_STEP_WORKSPACE_BYTES,
  stepWorkspaceBytes,
} from "../../../src/config/activation_bytes.js";
import { loadModelConfig } from "../../../src/config/model_config.js";

const GiB = 2 ** 30;

describe("stepWorkspaceBytes", () => {
  it("bounds one Llama-3.1-8B layer's temporaries per token from the shapes", () => {
    const c = loadModelConfig("configs/llama-3.1-8b");
    // 2 x 4096 outside the layer; qkv 6144 twice + attention out 4096 + o 4096; MLP 3 x 14336 + 4096.
    assert.equal(activationBytesPerToken(c), (2 * 4096 + 2 * 6144 + 4096 + 4096 + 3 * 14336 + 4096) * 2);
  });

  it("keeps the 2 GiB floor at 8192 tokens and grows with max_num_batched_tokens", () => {
    const c = loadModelConfig("configs/llama-3.1-8b");
    assert.equal(stepWorkspaceBytes(c, 2048), MIN_STEP_WORKSPACE_BYTES);
    assert.equal(stepWorkspaceBytes(c, 8192), MIN_STEP_WORKSPACE_BYTES);
    const big = stepWorkspaceBytes(c, 32768);
    assert.ok(big > 5 * GiB && big < 7 * GiB, `${big / GiB} GiB`);
    assert.ok(stepWorkspaceBytes(c, 65536) > big);
  });

  it("counts the routed experts' permuted rows of MoE models and MLA's latent widths", () => {
    const moe = loadModelConfig("configs/qwen3-30b-a3b");
    const glm5 = loadModelConfig("configs/glm-5");
    // Qwen3-30B-A3B: 8 routed rows of (2 x 2048 + 3 x 768) dominate its dense MLP (3 x 6144 + 2048).
    assert.ok(activationBytesPerToken(moe) > 8 * (2 * 2048 + 3 * 768) * 2);
    assert.ok(activationBytesPerToken(glm5) > glm5.numAttentionHeads * glm5.mla!.kvLoraRank * 2);
    for (const c of [moe, glm5]) assert.ok(stepWorkspaceBytes(c, 16384) > MIN_STEP_WORKSPACE_BYTES);
  });
});
