/**
 * CUDA graph capture and replay through Backend.graphs: a replayed op sequence gives bit-for-bit
 * the eager result and follows inputs updated with writeTensor. GPU machine only.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { Tensor } from "../../src/backends/backend.js";
import type { CudaBackend } from "../../src/backends/cuda/cuda_backend.js";
import { roundBf16 } from "../../src/backends/cuda/half.js";
import { assertSame, gpuSkip, makeBackend, Rng, randBf16 } from "./helpers.js";

const skip = gpuSkip();

describe("CUDA graphs", { skip }, () => {
  let be: CudaBackend;
  const rng = new Rng(42);
  const [V, H, I, T] = [512, 256, 512, 8];
  let table: Tensor;
  let norm: Tensor;
  let gateUp: Tensor;
  let gateUpBias: Tensor;
  let down: Tensor;
  let ids: Tensor;

  before(() => {
    be = makeBackend();
    table = be.upload(randBf16(rng, V * H), [V, H], "bf16");
    norm = be.upload(
      Float32Array.from(randBf16(rng, H, 0.1), (v) => roundBf16(1 + v)),
      [H],
      "bf16",
    );
    gateUp = be.uploadWeight({ data: randBf16(rng, 2 * I * H, 0.06), dtype: "f32", shape: [2 * I, H] });
    gateUpBias = be.uploadWeight({ data: randBf16(rng, 2 * I, 0.1), dtype: "f32", shape: [2 * I] });
    down = be.uploadWeight({ data: randBf16(rng, H * I, 0.04), dtype: "f32", shape: [H, I] });
    ids = be.upload(new Int32Array(T), [T], "i32"); // the graph's input: a persistent tensor
  });
  after(() => be?.dispose());

  /** A small forward: embedding -> rmsNorm -> linear(+bias) -> siluAndMul -> linear (f32 out). */
  function forward(): Tensor {
    const h = be.rmsNorm(be.embedding(ids, table), norm, 1e-5);
    const act = be.siluAndMul(be.linear(h, gateUp, gateUpBias));
    return be.linear(act, down, null, "f32");
  }

  function eager(tokenIds: Int32Array): Float32Array {
    be.resetWorkspace();
    be.writeTensor(ids, tokenIds);
    return be.toHost(forward()) as Float32Array;
  }

  it("replays give the eager results, for each new input", () => {
    const inputs = [0, 1, 2].map(() => Int32Array.from({ length: T }, () => rng.int(0, V)));
    const expected = inputs.map(eager); // also the warm-up before capture
    be.resetWorkspace();
    let out: Tensor | null = null;
    const g = be.graphs.capture(() => {
      out = forward();
    });
    assert.ok(be.graphs.numNodes(g) >= 5, `graph has ${be.graphs.numNodes(g)} nodes`);
    for (let round = 0; round < 2; round++) {
      for (let i = 0; i < inputs.length; i++) {
        be.resetWorkspace();
        be.writeTensor(ids, inputs[i]!);
        be.graphs.replay(g);
        // Ops after a replay get workspace above the graph's region: the output stays intact.
        be.stage(new Float32Array(4096).fill(7), [4096], "f32");
        assertSame(be.toHost(out!), expected[i]!, `replay ${round}.${i}`);
      }
    }
    be.graphs.dispose(g);
    assert.throws(() => be.graphs.replay(g), /unknown or disposed graph/);
  });

  it("a replay needs the graph's workspace region free", () => {
    be.resetWorkspace();
    const g = be.graphs.capture(() => {
      forward();
    });
    be.resetWorkspace();
    be.stage(new Float32Array(16), [16], "f32");
    assert.throws(() => be.graphs.replay(g), /call resetWorkspace\(\) before replay/);
    be.graphs.dispose(g);
  });

  it("forbidden work during capture aborts it cleanly; eager ops keep working", () => {
    be.resetWorkspace();
    assert.throws(
      () =>
        be.graphs.capture(() => {
          be.toHost(forward());
        }),
      /toHost is not allowed during CUDA graph capture/,
    );
    assert.throws(
      () => be.graphs.capture(() => void be.upload(new Float32Array(4), [4], "f32")),
      /during CUDA graph capture/,
    );
    const x = Int32Array.from({ length: T }, (_, i) => i);
    const a = eager(x);
    const b = eager(x);
    assertSame(a, b, "eager after aborted captures");
    assert.equal(be.graphs.size, 0);
  });
});
