// Variants of configs/glm-5 for bench/plan_glm5_tp8.sh (config-only folders):
//   <out>        = 1,048,576 positions, indexer on 21 layers (every 4th from 0, and 77), the others
//                  "shared" (GLM-5.x IndexShare; which layers are full changes no byte figure);
//   <out>/../glm-5-1m = 1,048,576 positions, every layer "full" (GLM-5's own layout).
// Usage: node make_variant.mjs configs/glm-5 OUT_DIR
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";

const [src, out] = process.argv.slice(2);
const base = JSON.parse(readFileSync(join(src, "config.json"), "utf8"));
const write = (dir, cfg) => {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "config.json"), `${JSON.stringify(cfg, null, 2)}\n`);
};
const full = base.indexer_types.map((_, l) => (l % 4 === 0 || l === 77 ? "full" : "shared"));
write(out, { ...base, max_position_embeddings: 1048576, indexer_types: full });
write(join(dirname(out), "glm-5-1m"), { ...base, max_position_embeddings: 1048576 });
