/**
 * Prints the peer table (bench/peers/peer_table.ts) from the two JSON files of one sitting and
 * writes it as markdown (scripts/gpu/peers_bench.sh runs it last):
 *   node dist/bench/peers/table.js --hisparse cuda_bench.json --nlc nlc_summary.json [--out FILE.md]
 * Exit 2 with one line when a file is missing or is not the JSON the table reads.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { basename } from "node:path";
import { parseArgs } from "node:util";
import type { z } from "zod";
import { hisparseBenchSchema, nlcSummarySchema, peerMarkdown, peerRows } from "./peer_table.js";

const { values } = parseArgs({
  options: { hisparse: { type: "string" }, nlc: { type: "string" }, out: { type: "string" } },
});
if (values.hisparse === undefined || values.nlc === undefined) {
  console.error(
    "usage: node dist/bench/peers/table.js --hisparse CUDA_BENCH.json --nlc NLC_SUMMARY.json [--out FILE.md]",
  );
  process.exit(2);
}

/** Reads and checks one input; one line naming the file and the first bad field otherwise. */
function read<T>(file: string, schema: z.ZodType<T>): T {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, "utf8"));
  } catch (e) {
    console.error(`peer table: cannot read ${file}: ${(e as Error).message}`);
    process.exit(2);
  }
  const r = schema.safeParse(raw);
  if (!r.success) {
    const i = r.error.issues[0]!;
    console.error(`peer table: ${file}: ${i.path.map(String).join(".") || "(top)"}: ${i.message}`);
    process.exit(2);
  }
  return r.data;
}

const hs = read(values.hisparse, hisparseBenchSchema);
const nlc = read(values.nlc, nlcSummarySchema);
const md = peerMarkdown(peerRows(hs, nlc), hs, nlc, [basename(values.hisparse), basename(values.nlc)]);
process.stdout.write(md);
if (values.out !== undefined) writeFileSync(values.out, md);
