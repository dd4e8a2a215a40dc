/**
 * A minimal OpenAI-compatible streaming server for CLI tests: every completion streams
 * `max_tokens` chunks of "tok " at once, then usage (prompt_tokens = 100 for every prompt).
 */
import http from "node:http";
import type { AddressInfo } from "node:net";

export const ECHO_PROMPT_TOKENS = 100;

export async function startEchoServer(): Promise<{
  url: string;
  close: () => Promise<void>;
  bodies: Record<string, unknown>[];
}> {
  const bodies: Record<string, unknown>[] = [];
  const server = http.createServer((req, res) => {
    if (req.method === "GET" && req.url === "/v1/models") {
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify({ object: "list", data: [{ id: "echo-model", object: "model" }] }));
      return;
    }
    let raw = "";
    req.on("data", (c) => {
      raw += c;
    });
    req.on("end", () => {
      const body = JSON.parse(raw) as { max_tokens: number };
      bodies.push(body);
      res.writeHead(200, { "content-type": "text/event-stream" });
      for (let i = 0; i < body.max_tokens; i++)
        res.write(
          `data: ${JSON.stringify({ choices: [{ index: 0, text: "tok ", finish_reason: null }] })}\n\n`,
        );
      const usage = { prompt_tokens: ECHO_PROMPT_TOKENS, completion_tokens: body.max_tokens };
      res.end(`data: ${JSON.stringify({ choices: [], usage })}\n\ndata: [DONE]\n\n`);
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    bodies,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}
