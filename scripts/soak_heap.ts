/**
 * Whether the server's event-loop heap grows under the soak's bad inputs and disconnects:
 * starts a server in this process (ref-small, CPU, loopback), runs 5 rounds of
 * `scripts/soak_client.ts chaos` (40 s each), and after each round forces a GC and prints
 * heapUsed, external, ArrayBuffers and RSS. Needs --expose-gc:
 *
 *   node --expose-gc --import tsx scripts/soak_heap.ts
 */
import { spawn } from "node:child_process";
import { startTestServer } from "../test/e2e/server/helpers.js";

const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) {
  console.error("soak_heap: run with node --expose-gc");
  process.exit(2);
}
const server = await startTestServer({ maxModelLen: 1024, cpuThreads: 1 });
const mib = (n: number) => (n / 2 ** 20).toFixed(1);
const mem = () => {
  gc();
  gc();
  const m = process.memoryUsage();
  return `heapUsed ${mib(m.heapUsed)} MiB, external ${mib(m.external)}, arrayBuffers ${mib(m.arrayBuffers)}, rss ${mib(m.rss)}`;
};
console.log("start", mem());
for (let round = 1; round <= 5; round++) {
  const out = await new Promise<string>((resolve) => {
    const c = spawn(
      process.execPath,
      ["--import", "tsx", "scripts/soak_client.ts", "chaos", server.url, "40", "1000"],
      {
        stdio: ["ignore", "pipe", "inherit"],
      },
    );
    let text = "";
    c.stdout.on("data", (d) => {
      text += d;
    });
    c.on("exit", () => resolve(text));
  });
  const j = JSON.parse(out) as { sent: number; unexpected: number };
  await new Promise((r) => setTimeout(r, 2000));
  console.log(`round ${round}: sent ${j.sent}, unexpected ${j.unexpected}; ${mem()}`);
}
await server.close();
