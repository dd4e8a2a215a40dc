// Reads a GGUF written by make_gguf.py back through node-llama-cpp's own GGUF parser and
// llama.cpp's tokenizer, and checks it against the shape asked for: the check of our writer by
// the program that consumes it (bench/peers/README.md). Run from a folder holding
// node-llama-cpp's node_modules (.peer/nlc here, the unpacked kit on the GPU machine):
//   node check_gguf.mjs FILE.gguf [--layers 32 --hidden 4096 --heads 32 --kv-heads 8 --head-dim 128
//        --ffn 14336 --vocab 128256] [--tiny] [--no-tokenize]
// --tiny expects make_gguf.py --tiny's shape. Unless --no-tokenize, the vocabulary alone is loaded
// (loadModel vocabOnly) and "Hello world" must tokenize to the Llama 3 ids [9906, 1917].
// Prints one JSON line {ok, ...}; exit 0 when every check passes, 1 otherwise.
import process from "node:process";
import { getLlama, LlamaLogLevel, readGgufFileInfo } from "node-llama-cpp";

const argv = process.argv.slice(2);
const file = argv[0];
if (!file || file.startsWith("--")) {
  console.error("usage: node check_gguf.mjs FILE.gguf [--tiny] [--layers N ...] [--no-tokenize]");
  process.exit(2);
}
const opt = (name, def) => {
  const i = argv.indexOf(`--${name}`);
  return i < 0 ? def : Number(argv[i + 1]);
};
const tiny = argv.includes("--tiny");
const want = {
  block_count: opt("layers", tiny ? 2 : 32),
  embedding_length: opt("hidden", tiny ? 256 : 4096),
  head_count: opt("heads", tiny ? 4 : 32),
  head_count_kv: opt("kv-heads", tiny ? 2 : 8),
  head_dim: opt("head-dim", tiny ? 64 : 128),
  feed_forward_length: opt("ffn", tiny ? 512 : 14336),
  vocab_size: opt("vocab", 128256),
};

const failures = [];
const expect = (what, got, wanted) => {
  if (JSON.stringify(got) !== JSON.stringify(wanted)) failures.push(`${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(wanted)}`);
};
const info = await readGgufFileInfo(file, { readTensorInfo: true });
const md = info.metadata;
const L = md.llama;
expect("version", info.version, 3);
expect("general.architecture", md.general.architecture, "llama");
expect("llama.block_count", L.block_count, want.block_count);
expect("llama.embedding_length", L.embedding_length, want.embedding_length);
expect("llama.attention.head_count", L.attention.head_count, want.head_count);
expect("llama.attention.head_count_kv", L.attention.head_count_kv, want.head_count_kv);
expect("llama.attention.key_length", L.attention.key_length, want.head_dim);
expect("llama.feed_forward_length", L.feed_forward_length, want.feed_forward_length);
expect("llama.vocab_size", L.vocab_size, want.vocab_size);
expect("tokenizer tokens", md.tokenizer.ggml.tokens.length, want.vocab_size);
expect("tokenizer.ggml.pre", md.tokenizer.ggml.pre, "llama-bpe");

// Tensor table: names, ggml shapes (ne[0] contiguous) and types; data offsets in order, aligned.
const H = want.embedding_length;
const qDim = want.head_count * want.head_dim;
const kvDim = want.head_count_kv * want.head_dim;
const F = want.feed_forward_length;
const BF16 = 30;
const F32 = 0;
const shapes = new Map([
  ["token_embd.weight", [[H, want.vocab_size], BF16]],
  ["output.weight", [[H, want.vocab_size], BF16]],
  ["output_norm.weight", [[H], F32]],
  ["rope_freqs.weight", [[want.head_dim / 2], F32]],
]);
for (let i = 0; i < want.block_count; i++) {
  const p = `blk.${i}.`;
  shapes.set(`${p}attn_norm.weight`, [[H], F32]);
  shapes.set(`${p}ffn_norm.weight`, [[H], F32]);
  shapes.set(`${p}attn_q.weight`, [[H, qDim], BF16]);
  shapes.set(`${p}attn_k.weight`, [[H, kvDim], BF16]);
  shapes.set(`${p}attn_v.weight`, [[H, kvDim], BF16]);
  shapes.set(`${p}attn_output.weight`, [[qDim, H], BF16]);
  shapes.set(`${p}ffn_gate.weight`, [[H, F], BF16]);
  shapes.set(`${p}ffn_up.weight`, [[H, F], BF16]);
  shapes.set(`${p}ffn_down.weight`, [[F, H], BF16]);
}
const tensors = info.fullTensorInfo ?? [];
expect("tensor count", tensors.length, shapes.size);
let lastEnd = 0;
let params = 0;
for (const t of tensors) {
  const s = shapes.get(t.name);
  if (!s) {
    failures.push(`unexpected tensor ${t.name}`);
    continue;
  }
  const dims = t.dimensions.map(Number);
  expect(`${t.name} dims`, dims, s[0]);
  expect(`${t.name} type`, t.ggmlType, s[1]);
  const off = Number(t.offset);
  if (off < lastEnd || off % 32 !== 0) failures.push(`${t.name}: offset ${off} (previous end ${lastEnd}, alignment 32)`);
  const n = dims.reduce((a, b) => a * b, 1);
  lastEnd = off + n * (t.ggmlType === BF16 ? 2 : 4);
  params += n;
}

let tokens = null;
if (!argv.includes("--no-tokenize")) {
  // "auto": the kit carries the CUDA prebuilt only (its CPU-only package is pruned)
  const llama = await getLlama({ gpu: "auto", build: "never", skipDownload: true, logLevel: LlamaLogLevel.error });
  const model = await llama.loadModel({ modelPath: file, vocabOnly: true });
  tokens = Array.from(model.tokenize("Hello world"));
  expect('tokenize("Hello world")', tokens, [9906, 1917]);
  await model.dispose();
  await llama.dispose();
}
const ok = failures.length === 0;
console.log(
  JSON.stringify({ ok, file, tensors: tensors.length, params, data_bytes: lastEnd, tokens, failures: failures.slice(0, 20) }),
);
process.exit(ok ? 0 : 1);
