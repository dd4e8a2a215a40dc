/**
 * NCCL through the addon (dlopen("libnccl.so.2"), native/addon/nccl.cc) on one GPU: a one-rank
 * communicator's all-reduce leaves its input, its all-gather copies it, eagerly and replayed
 * inside a CUDA graph; and the vocab-parallel embedding lookup (gatherRows' firstIndex) gives
 * zero rows outside the shard. GPU machine only; skipped elsewhere. The multi-rank collectives
 * are checked end to end by scripts/gpu/tp_check.sh.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { createRendezvous } from "../../src/backends/collectives.js";
import type { CudaBackend } from "../../src/backends/cuda/cuda_backend.js";
import { NcclCommunicator } from "../../src/backends/cuda/nccl_communicator.js";
import { gpuSkip, makeBackend } from "./helpers.js";

const skip = gpuSkip();

describe("NCCL on one GPU", { skip }, () => {
  let be: CudaBackend;
  let comm: NcclCommunicator;
  before(() => {
    be = makeBackend();
    comm = NcclCommunicator.create(be, createRendezvous(1), 0);
  });
  after(() => {
    comm?.dispose();
    be?.dispose();
  });

  it("reports the NCCL version", () => {
    assert.match(comm.description, /^NCCL \d+\.\d+\.\d+$/);
  });

  it("all-reduce (one rank) leaves the values; all-gather of columns copies them; both replay in a graph", () => {
    const x = Float32Array.from({ length: 6 * 8 }, (_, i) => i * 0.5 - 3);
    be.resetWorkspace();
    const t = be.stage(x, [6, 8], "f32");
    comm.allReduce(t);
    assert.deepEqual(be.toHost(t), x);
    const g = be.toHost(comm.allGatherColumns(t));
    assert.deepEqual(g, x);
    be.resetWorkspace();
    const input = be.upload(x, [6, 8], "f32");
    let out = input;
    const graph = be.graphs.capture(() => {
      comm.allReduce(input);
      out = comm.allGatherColumns(input);
    });
    be.resetWorkspace(); // a replay rewrites the workspace bytes the capture used (graphs.ts)
    be.graphs.replay(graph);
    assert.deepEqual(be.toHost(out), x);
    be.graphs.dispose(graph);
    be.free(input);
  });

  it("embedding with vocabStart: ids of the shard [4, 8) read their rows, others are zero rows", () => {
    be.resetWorkspace();
    const table = be.upload(
      Float32Array.from({ length: 4 * 2 }, (_, i) => i + 1),
      [4, 2],
      "f32",
    );
    const ids = be.stage(Int32Array.from([3, 4, 7, 8, 5]), [5], "i32");
    const rows = be.toHost(be.embedding(ids, table, 4));
    assert.deepEqual(Array.from(rows), [0, 0, 1, 2, 7, 8, 0, 0, 3, 4]);
    be.free(table);
  });
});
