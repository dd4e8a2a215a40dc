/**
 * The server /metrics figures a benchmark reads (src/bench/server_metrics.ts): series sums over
 * label sets, histogram sums and counts, their deltas over a run and the means in ms.
 */
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, test } from "node:test";
import {
  meanMs,
  readServerCounters,
  type ServerCounters,
  seriesSum,
  serverCountersDelta,
} from "../../../src/bench/server_metrics.js";

/** An exposition text with the given queue and prefill histogram totals (seconds, requests). */
function exposition(queue: [number, number], prefill: [number, number], ttft: [number, number]): string {
  const h = (name: string, [sum, count]: [number, number]) =>
    `# TYPE ${name} histogram\n${name}_bucket{le="0.3",model_name="m"} ${count}\n${name}_sum{model_name="m"} ${sum}\n${name}_count{model_name="m"} ${count}\n`;
  return (
    'vllm:prefix_cache_queries_total{model_name="m"} 1000\n' +
    'vllm:prefix_cache_hits_total{model_name="m",tier="device"} 600\n' +
    'vllm:prefix_cache_hits_total{model_name="m",tier="host"} 100\n' +
    'vllm:num_preemptions_total{model_name="m"} 2\n' +
    h("vllm:request_queue_time_seconds", queue) +
    h("vllm:request_prefill_time_seconds", prefill) +
    h("vllm:time_to_first_token_seconds", ttft)
  );
}

let body = "";
let server: Server;
let url = "";
before(async () => {
  server = createServer((_, res) => res.end(body));
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
after(() => server.close());

test("seriesSum adds a series over its label sets; a prefix of another name does not match", () => {
  const t = exposition([0, 0], [0, 0], [0, 0]);
  assert.equal(seriesSum(t, "vllm:prefix_cache_hits_total"), 700);
  assert.equal(seriesSum(t, "vllm:prefix_cache_hits_total", 'tier="host"'), 100);
  assert.equal(seriesSum(t, "vllm:request_queue_time_seconds"), null, "only _bucket/_sum/_count exist");
  assert.equal(seriesSum(t, "vllm:nope"), null);
});

test("a run's split: 4 requests, 0.2 s queued and 0.6 s of prefill in all: 50 ms and 150 ms a request", async () => {
  body = exposition([1.0, 10], [3.0, 10], [4.0, 10]);
  const before = (await readServerCounters(url))!;
  body = exposition([1.2, 14], [3.6, 14], [4.8, 14]);
  const after = (await readServerCounters(url))!;
  const d: ServerCounters = serverCountersDelta(after, before);
  assert.equal(d.queueTime!.count, 4);
  assert.ok(Math.abs(meanMs(d.queueTime)! - 50) < 1e-9);
  assert.ok(Math.abs(meanMs(d.prefillTime)! - 150) < 1e-9);
  assert.ok(Math.abs(meanMs(d.ttft)! - 200) < 1e-9);
  assert.equal(d.prefixQueries, 0);
  assert.equal(d.preemptions, 0);
});

test("a server without the phase histograms (older hisparse, other servers): null, and no mean", async () => {
  body = 'vllm:num_preemptions_total{model_name="m"} 0\n';
  const c = (await readServerCounters(url))!;
  assert.equal(c.prefillTime, null);
  assert.equal(meanMs(serverCountersDelta(c, c).prefillTime), null);
  assert.equal(meanMs({ sum: 0, count: 0 }), null, "no request: no mean");
});
