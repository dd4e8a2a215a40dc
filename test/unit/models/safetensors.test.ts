import assert from "node:assert/strict";
import {
  closeSync,
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
  truncateSync,
  unlinkSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { loadModelConfig } from "../../../src/config/model_config.js";
import { llamaWeightSpecs } from "../../../src/models/dummy.js";
import { SafetensorsCheckpoint } from "../../../src/models/safetensors.js";
import { WeightLoadError } from "../../../src/models/weights.js";
import { f32Bytes, u16Bytes, writeSafetensors } from "./helpers.js";

const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const REF = join(ROOT, "models/ref-small");
const SHARD1 = "model-00001-of-00002.safetensors";
const SHARD2 = "model-00002-of-00002.safetensors";
const tmp = mkdtempSync(join(tmpdir(), "hisparse-st-"));
after(() => rmSync(tmp, { recursive: true, force: true }));

let dirCount = 0;
/** A fresh temp copy of ref-small's index and shards. */
function refCopy(): string {
  const dir = join(tmp, `ref${dirCount++}`);
  mkdirSync(dir);
  for (const f of ["config.json", "model.safetensors.index.json", SHARD1, SHARD2])
    copyFileSync(join(REF, f), join(dir, f));
  return dir;
}

function newDir(): string {
  const dir = join(tmp, `d${dirCount++}`);
  mkdirSync(dir);
  return dir;
}

function loadError(fn: () => unknown): string {
  try {
    fn();
  } catch (e) {
    assert.ok(e instanceof WeightLoadError, `expected WeightLoadError, got ${e}`);
    return e.message;
  }
  assert.fail("expected a WeightLoadError");
}

/** Reads element `index` of a tensor's bf16 bits straight from the file, parsing the header by hand. */
function rawBf16(file: string, name: string, index: number): number {
  const buf = readFileSync(file);
  const n = Number(buf.readBigUInt64LE(0));
  const entry = (
    JSON.parse(buf.subarray(8, 8 + n).toString("utf8")) as Record<string, { data_offsets: number[] }>
  )[name]!;
  return buf.readUInt16LE(8 + n + entry.data_offsets[0]! + 2 * index);
}

describe("SafetensorsCheckpoint: the ref-small checkpoint", () => {
  it("holds exactly the tensors the Llama family needs, with the right shapes and bf16 dtype", () => {
    const config = loadModelConfig(REF);
    const ckpt = SafetensorsCheckpoint.open(REF);
    try {
      const specs = llamaWeightSpecs(config); // tied embeddings: no lm_head
      assert.equal(specs.length, 2 + 4 * 9);
      assert.deepEqual([...ckpt.names].sort(), specs.map((s) => s.name).sort());
      for (const s of specs) {
        const t = ckpt.get(s.name);
        assert.equal(t.dtype, "bf16", s.name);
        assert.deepEqual(t.shape, s.shape, s.name);
        assert.ok(t.data instanceof Uint16Array);
        assert.equal(
          t.data.length,
          s.shape.reduce((a, b) => a * b, 1),
        );
      }
      assert.equal(ckpt.entry("model.norm.weight")?.file, 1); // second shard (sorted order)
    } finally {
      ckpt.close();
    }
  });

  it("returns the stored bf16 bits (spot checks against the file bytes)", () => {
    const ckpt = SafetensorsCheckpoint.open(REF);
    try {
      const ln0 = ckpt.get("model.layers.0.input_layernorm.weight").data;
      assert.deepEqual(Array.from(ln0.subarray(0, 4)), [0x3f0d, 0x3f25, 0x3f19, 0x3f09]);
      const norm = ckpt.get("model.norm.weight").data; // in shard 2
      assert.deepEqual(Array.from(norm.subarray(0, 4)), [0x4019, 0x4017, 0x4011, 0x4007]);
      const emb = ckpt.get("model.embed_tokens.weight").data;
      assert.deepEqual(Array.from(emb.subarray(100 * 256 + 7, 100 * 256 + 10)), [0xbd12, 0x3d72, 0xbc45]);
      const k2 = ckpt.get("model.layers.2.self_attn.k_proj.weight").data;
      assert.deepEqual(Array.from(k2.subarray(12345, 12348)), [0xbc33, 0xbd70, 0x3c7b]);
      for (const i of [0, 999, 32767]) {
        assert.equal(k2[i], rawBf16(join(REF, SHARD1), "model.layers.2.self_attn.k_proj.weight", i));
      }
      assert.equal(norm[255], rawBf16(join(REF, SHARD2), "model.norm.weight", 255));
    } finally {
      ckpt.close();
    }
  });

  it("throws after close", () => {
    const ckpt = SafetensorsCheckpoint.open(REF);
    ckpt.close();
    assert.match(
      loadError(() => ckpt.get("model.norm.weight")),
      /was already closed$/,
    );
  });
});

describe("SafetensorsCheckpoint: single-file checkpoints and dtypes", () => {
  it("reads F32, F16 and BF16 from model.safetensors, also at unaligned offsets", () => {
    const dir = newDir();
    // A 2-byte tensor first, and header padding chosen so, put the F32 data at an offset that
    // is not a multiple of 4.
    const write = (pad: number) =>
      writeSafetensors(
        join(dir, "model.safetensors"),
        {
          half: { dtype: "F16", shape: [1], bytes: u16Bytes([0x3c00]) },
          f32: { dtype: "F32", shape: [2, 2], bytes: f32Bytes([1.5, -2, 0.25, 3e-8]) },
          bf: { dtype: "BF16", shape: [3], bytes: u16Bytes([0x3f80, 0xc000, 0x0001]) },
        },
        pad,
      );
    write(0);
    let ckpt = SafetensorsCheckpoint.open(dir);
    if (ckpt.entry("f32")!.start % 4 === 0) {
      ckpt.close();
      write(1);
      ckpt = SafetensorsCheckpoint.open(dir);
    }
    assert.notEqual(ckpt.entry("f32")!.start % 4, 0, "test must exercise an unaligned offset");
    assert.deepEqual(ckpt.get("f32"), {
      dtype: "f32",
      shape: [2, 2],
      data: new Float32Array([1.5, -2, 0.25, 3e-8]),
    });
    assert.deepEqual(ckpt.get("half"), { dtype: "f16", shape: [1], data: new Uint16Array([0x3c00]) });
    assert.deepEqual(ckpt.get("bf"), {
      dtype: "bf16",
      shape: [3],
      data: new Uint16Array([0x3f80, 0xc000, 0x0001]),
    });
    assert.equal(ckpt.has("f32"), true);
    assert.equal(ckpt.has("nope"), false);
    assert.equal(
      loadError(() => ckpt.get("nope")),
      "checkpoint has no tensor nope",
    );
    ckpt.close();
  });

  it("names an unsupported dtype when the tensor is read", () => {
    const dir = newDir();
    const path = join(dir, "model.safetensors");
    writeSafetensors(path, { fp8: { dtype: "F8_E4M3", shape: [4], bytes: new Uint8Array(4) } });
    const ckpt = SafetensorsCheckpoint.open(dir);
    assert.equal(
      loadError(() => ckpt.get("fp8")),
      `tensor fp8 in ${path} has dtype F8_E4M3, which is not supported (supported: BF16, F16, F32)`,
    );
    ckpt.close();
  });

  it("rejects a byte size that does not match shape × dtype", () => {
    const dir = newDir();
    const path = join(dir, "model.safetensors");
    writeSafetensors(path, { w: { dtype: "F32", shape: [3], bytes: new Uint8Array(8) } });
    assert.equal(
      loadError(() => SafetensorsCheckpoint.open(dir)),
      `tensor w in ${path} has 8 bytes but its shape [3] of F32 needs 12`,
    );
  });
});

describe("SafetensorsCheckpoint: broken checkpoints fail with one sentence naming the file", () => {
  it("missing directory, and a directory without weights", () => {
    const missing = join(tmp, "missing");
    assert.equal(
      loadError(() => SafetensorsCheckpoint.open(missing)),
      `model directory ${missing} does not exist`,
    );
    const empty = newDir();
    assert.equal(
      loadError(() => SafetensorsCheckpoint.open(empty)),
      `model directory ${empty} has no model.safetensors or model.safetensors.index.json (use --load-format dummy to run without weights)`,
    );
  });

  it("truncated shard (a download cut short)", () => {
    const dir = refCopy();
    truncateSync(join(dir, SHARD2), 788504 - 100);
    // model.norm.weight is the last tensor of shard 2: data bytes [787456, 787968) after the
    // 8 + 528 header bytes end at 788504, past the new end; every other tensor still fits.
    assert.equal(
      loadError(() => SafetensorsCheckpoint.open(dir)),
      `tensor model.norm.weight needs bytes up to 788504 but ${join(dir, SHARD2)} has only 788404 bytes (truncated download?)`,
    );
  });

  it("corrupt header JSON", () => {
    const dir = refCopy();
    const fd = openSync(join(dir, SHARD2), "r+");
    writeSync(fd, new TextEncoder().encode("#"), 0, 1, 8); // the header's opening "{"
    closeSync(fd);
    assert.match(
      loadError(() => SafetensorsCheckpoint.open(dir)),
      new RegExp(`^${join(dir, SHARD2)} has a corrupt header \\(`),
    );
  });

  it("header length beyond the file size", () => {
    const dir = refCopy();
    const fd = openSync(join(dir, SHARD2), "r+");
    const len = new Uint8Array(8);
    new DataView(len.buffer).setBigUint64(0, 10_000_000n, true);
    writeSync(fd, len, 0, 8, 0);
    closeSync(fd);
    assert.equal(
      loadError(() => SafetensorsCheckpoint.open(dir)),
      `${join(dir, SHARD2)} declares a 10000000-byte header but the file has only 788504 bytes (corrupt or truncated file)`,
    );
  });

  it("missing shard", () => {
    const dir = refCopy();
    unlinkSync(join(dir, SHARD2));
    assert.equal(
      loadError(() => SafetensorsCheckpoint.open(dir)),
      `shard ${SHARD2} listed in ${join(dir, "model.safetensors.index.json")} is missing from ${dir}`,
    );
  });

  it("wrong dtype in a shard header (same byte size, unsupported type)", () => {
    const dir = refCopy();
    const path = join(dir, SHARD2);
    const buf = readFileSync(path);
    const n = Number(buf.readBigUInt64LE(0));
    const header = buf.subarray(8, 8 + n).toString("utf8");
    const entry = '"model.norm.weight":{"dtype":"BF16"';
    assert.ok(header.includes(entry));
    // "U16" plus one space keeps the header length, so only the dtype changes.
    buf.write(header.replace(entry, '"model.norm.weight":{"dtype":"U16" '), 8, "utf8");
    writeFileSync(path, buf);
    const ckpt = SafetensorsCheckpoint.open(dir);
    assert.equal(
      loadError(() => ckpt.get("model.norm.weight")),
      `tensor model.norm.weight in ${path} has dtype U16, which is not supported (supported: BF16, F16, F32)`,
    );
    ckpt.close();
  });

  it("an index that maps a tensor to a shard that does not hold it", () => {
    const dir = refCopy();
    const indexPath = join(dir, "model.safetensors.index.json");
    const index = JSON.parse(readFileSync(indexPath, "utf8")) as { weight_map: Record<string, string> };
    index.weight_map["model.norm.weight"] = SHARD1;
    writeFileSync(indexPath, JSON.stringify(index));
    assert.equal(
      loadError(() => SafetensorsCheckpoint.open(dir)),
      `index maps tensor model.norm.weight to ${SHARD1}, but that shard does not hold it`,
    );
    writeFileSync(indexPath, "{not json");
    assert.match(
      loadError(() => SafetensorsCheckpoint.open(dir)),
      /model\.safetensors\.index\.json is not valid JSON/,
    );
  });
});
