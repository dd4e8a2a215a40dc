/**
 * Prints our RoPE of one model folder as JSON for scripts/gpu/yarn_parity.py: the rope config,
 * inv_freq [rotaryDim / 2], the cos/sin multiplier, the derived max model length and, for the
 * positions given, the cos/sin rows [2 * rotaryDim / 2] that attention_gqa.ts uploads (the CPU
 * and CUDA backends both rotate with that table).
 *
 * usage: node dist/scripts/gpu/yarn_dump.js <model dir> [position ...]
 */
import { derivedMaxModelLen, loadModelConfig } from "../../src/config/model_config.js";
import { buildCosSinCache, computeInvFreq, ropeAttentionFactor } from "../../src/models/rope.js";

const [dir, ...rest] = process.argv.slice(2);
if (dir === undefined) {
  console.error("usage: yarn_dump.js <model dir> [position ...]");
  process.exit(2);
}
const c = loadModelConfig(dir);
const R = c.rotaryDim ?? c.headDim;
const inv = computeInvFreq(c.rope, R);
const scale = ropeAttentionFactor(c.rope);
const positions = rest.map(Number);
const table = buildCosSinCache(inv, Math.max(0, ...positions) + 1, scale);
const rows = positions.map((p) => Array.from(table.subarray(p * R, (p + 1) * R)));
console.log(
  JSON.stringify({
    rope: c.rope,
    rotaryDim: R,
    invFreq: Array.from(inv),
    attentionFactor: scale,
    derivedMaxModelLen: derivedMaxModelLen(c),
    positions,
    cosSin: rows,
  }),
);
