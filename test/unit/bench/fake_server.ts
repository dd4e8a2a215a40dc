/**
 * A scripted OpenAI-compatible streaming server on loopback with a virtual clock, so a benchmark
 * run's timings are exact: the server plays a timeline of chunks; before each chunk it sets the
 * clock to the chunk's scripted time and, after writing it, waits until the client has read the
 * clock for it (the client reports each reading through `BenchClock.onEvent`). A request's start
 * reading happens at the clock value when the client sends it, so with a concurrency cap the
 * server also waits for the queued requests to start before moving the clock on.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import type { BenchClock } from "../../../src/bench/request_func.js";

/** One scripted request, matched by its prompt. */
export interface ScriptedRequest {
  prompt: string;
  /** Token chunks: virtual time (s) and text, in time order. */
  chunks: { t: number; text: string }[];
  /** Usage sent after the last chunk (include_usage), or null for none. */
  usage: { prompt_tokens: number; completion_tokens: number } | null;
  /** HTTP error status instead of a stream. */
  status?: number;
}

/** The virtual clock the benchmark reads; counts readings per request id. */
export class VirtualClock implements BenchClock {
  t = 0;
  readonly starts: string[] = [];
  readonly chunkReads = new Map<string, number>();
  private wakers: (() => void)[] = [];

  now(): number {
    return this.t;
  }

  onEvent(requestId: string | undefined, kind: "start" | "chunk"): void {
    const id = requestId ?? "";
    if (id.startsWith("warmup")) return;
    if (kind === "start") this.starts.push(id);
    else this.chunkReads.set(id, (this.chunkReads.get(id) ?? 0) + 1);
    this.wake();
  }

  /** Re-checks every pending `until` condition. */
  wake(): void {
    const w = this.wakers;
    this.wakers = [];
    for (const f of w) f();
  }

  /** Resolves once `cond()` holds (re-checked after every clock event). */
  async until(cond: () => boolean): Promise<void> {
    while (!cond()) await new Promise<void>((r) => this.wakers.push(r));
  }
}

/** What the server saw of one request. */
export interface ReceivedRequest {
  url: string;
  headers: http.IncomingHttpHeaders;
  body: Record<string, unknown>;
}

export class FakeOpenAIServer {
  readonly clock = new VirtualClock();
  readonly received: ReceivedRequest[] = [];
  private readonly server: http.Server;
  /** Open responses of main requests by script index, and their x-request-id. */
  private readonly open = new Map<number, { res: http.ServerResponse; id: string; chat: boolean }>();
  private arrivalWakers: (() => void)[] = [];
  private timeline: Promise<void> | null = null;
  /** Requests answered in full (errors included). */
  private completed = 0;

  /**
   * @param script the main requests (warm-ups, whose x-request-id starts with "warmup", get one
   *   immediate chunk)
   * @param maxConcurrency the client's cap, to know when queued requests start (null = none)
   */
  constructor(
    private readonly script: ScriptedRequest[],
    private readonly maxConcurrency: number | null = null,
  ) {
    this.server = http.createServer((req, res) => {
      let body = "";
      req.setEncoding("utf8");
      req.on("data", (c: string) => {
        body += c;
      });
      req.on("end", () => this.handle(req, res, body));
    });
  }

  /** Starts listening on an ephemeral loopback port; returns the base URL. */
  async listen(): Promise<string> {
    await new Promise<void>((r) => this.server.listen(0, "127.0.0.1", r));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async close(): Promise<void> {
    await this.timeline;
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
  }

  private handle(req: http.IncomingMessage, res: http.ServerResponse, raw: string): void {
    if (req.method === "GET" && req.url === "/v1/models") {
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify({ object: "list", data: [{ id: "fake-model", object: "model" }] }));
      return;
    }
    const body = JSON.parse(raw) as Record<string, unknown>;
    this.received.push({ url: req.url ?? "", headers: req.headers, body });
    const chat = req.url === "/v1/chat/completions";
    const id = String(req.headers["x-request-id"] ?? "");
    const prompt = chat ? (body.messages as { content: string }[])[0]!.content : String(body.prompt);
    if (id.startsWith("warmup")) {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.end(`data: ${chunk(chat, "w")}\n\ndata: [DONE]\n\n`);
      return;
    }
    const index = this.script.findIndex((s) => s.prompt === prompt);
    if (index < 0) throw new Error(`unscripted prompt ${prompt}`);
    const s = this.script[index]!;
    if (s.status !== undefined) {
      res.writeHead(s.status, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: { message: "scripted failure", type: "server_error" } }));
      this.completed++;
    } else {
      res.writeHead(200, { "content-type": "text/event-stream" });
      this.open.set(index, { res, id, chat });
    }
    this.timeline ??= this.play();
    const w = this.arrivalWakers;
    this.arrivalWakers = [];
    for (const f of w) f();
    this.clock.wake();
  }

  private async arrived(index: number): Promise<{ res: http.ServerResponse; id: string; chat: boolean }> {
    while (!this.open.has(index)) await new Promise<void>((r) => this.arrivalWakers.push(r));
    return this.open.get(index)!;
  }

  /** Plays every chunk in time order (ties: script order). */
  private async play(): Promise<void> {
    const n = this.script.length;
    const events = this.script
      .flatMap((s, i) => s.chunks.map((c, k) => ({ i, k, ...c })))
      .sort((a, b) => a.t - b.t || a.i - b.i);
    const expectedStarts = () => Math.min(n, (this.maxConcurrency ?? n) + this.completed);
    for (const e of events) {
      await this.clock.until(() => this.clock.starts.length >= expectedStarts());
      const { res, id, chat } = await this.arrived(e.i);
      this.clock.t = e.t;
      res.write(`data: ${chunk(chat, e.text)}\n\n`);
      await this.clock.until(() => (this.clock.chunkReads.get(id) ?? 0) >= e.k + 1);
      const s = this.script[e.i]!;
      if (e.k === s.chunks.length - 1) {
        if (s.usage !== null) res.write(`data: ${JSON.stringify({ choices: [], usage: s.usage })}\n\n`);
        res.end("data: [DONE]\n\n");
        this.completed++;
      }
    }
  }
}

function chunk(chat: boolean, text: string): string {
  return JSON.stringify(
    chat
      ? {
          object: "chat.completion.chunk",
          choices: [{ index: 0, delta: { content: text }, finish_reason: null }],
        }
      : { object: "text_completion", choices: [{ index: 0, text, finish_reason: null }] },
  );
}
