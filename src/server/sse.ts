import type { ServerResponse } from "node:http";

/** The last event of every stream (OpenAI's SSE protocol). */
export const SSE_DONE = "data: [DONE]\n\n";

/** One server-sent event carrying a JSON payload: `data: <json>\n\n`. */
export function sseEvent(payload: unknown): string {
  return `data: ${JSON.stringify(payload)}\n\n`;
}

/**
 * Calls `onGone` once if the client's connection closes before the response was fully sent
 * (the `close` event of a ServerResponse fires in both cases; `writableFinished` tells them
 * apart), or soon after this call when the connection is already closed. Works for streamed
 * and non-streamed replies.
 * @returns a function telling whether the client is gone.
 */
export function onClientGone(res: ServerResponse, onGone: () => void): () => boolean {
  let gone = false;
  const leave = () => {
    if (gone || res.writableFinished) return;
    gone = true;
    onGone();
  };
  // A client that left before this was called (e.g. while its prompt was tokenized) will
  // never emit "close" again.
  if (res.destroyed) queueMicrotask(leave);
  else res.once("close", leave);
  return () => gone || res.destroyed;
}

/**
 * A text/event-stream reply written straight to the Node response (the route has hijacked the
 * reply from fastify). Writes after the client left are dropped.
 */
export class SseWriter {
  constructor(private readonly res: ServerResponse) {}

  /** Sends the status line and headers (200, text/event-stream, no caching). */
  open(): void {
    this.res.writeHead(200, {
      "content-type": "text/event-stream; charset=utf-8",
      "cache-control": "no-cache",
      connection: "keep-alive",
      "x-accel-buffering": "no",
    });
    this.res.flushHeaders();
  }

  /** True while the response can still be written. */
  get writable(): boolean {
    return !this.res.destroyed && !this.res.writableEnded;
  }

  /** Sends one JSON event. */
  send(payload: unknown): void {
    if (this.writable) this.res.write(sseEvent(payload));
  }

  /** Sends `data: [DONE]` and ends the response. */
  done(): void {
    if (!this.writable) return;
    this.res.end(SSE_DONE);
  }
}
