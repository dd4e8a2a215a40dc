/**
 * One streamed request to an OpenAI-compatible server, timed as `vllm bench serve` times it
 * (vllm/benchmarks/lib/endpoint_request_func.py): the clock starts just before the request is
 * sent; each SSE chunk carrying `choices` is a token chunk (its text may be empty); TTFT = first
 * token chunk − start; ITL = gaps between successive token chunks; latency (E2EL) = last token
 * chunk − start; `usage.completion_tokens` (stream_options.include_usage) gives the output token
 * count and `usage.prompt_tokens` the prompt length when the server reports them.
 */
import http from "node:http";
import https from "node:https";
import { SseParser } from "./sse.js";

/** Which OpenAI API a benchmark drives (`--backend`, vLLM's names). */
export type EndpointKind = "openai" | "openai-chat";

/** Inputs of one request (vLLM RequestFuncInput). */
export interface RequestFuncInput {
  kind: EndpointKind;
  /** Full URL of the endpoint, e.g. http://127.0.0.1:8000/v1/completions. */
  apiUrl: string;
  model: string;
  /** Text, or token ids (completions only: multi-turn histories are sent as ids, exactly). */
  prompt: string | number[];
  /** Prompt length in tokens (client tokenizer); replaced by usage.prompt_tokens when reported. */
  promptLen: number;
  /** `max_tokens` (completions) / `max_completion_tokens` (chat). */
  outputLen: number;
  /** Sends `ignore_eos: true` (vLLM extension) so every request produces outputLen tokens. */
  ignoreEos: boolean;
  /** Extra JSON fields merged into the body (`--extra-body`), e.g. temperature. */
  extraBody?: Record<string, unknown>;
  /** Sent as `x-request-id`. */
  requestId?: string;
  /** Extra headers (an `Authorization` header is added from `apiKey`). */
  apiKey?: string;
}

/** Result of one request (vLLM RequestFuncOutput); times in seconds. */
export interface RequestFuncOutput {
  success: boolean;
  generatedText: string;
  /** E2EL: last token chunk − start (0 when it failed). */
  latency: number;
  /** usage.completion_tokens, or 0 when the server did not report usage. */
  outputTokens: number;
  /** First token chunk − start. */
  ttft: number;
  /** Gaps between successive token chunks. */
  itl: number[];
  promptLen: number;
  error: string;
  /** Clock reading when the request was sent. */
  startTime: number;
}

/** The time source of a benchmark and an optional observer of its events (tests, traces). */
export interface BenchClock {
  /** Seconds on a monotonic clock. */
  now(): number;
  /** Called right after each clock reading of a request: its start and each token chunk. */
  onEvent?(requestId: string | undefined, kind: "start" | "chunk", t: number): void;
}

/** performance.now() in seconds. */
export const systemClock: BenchClock = { now: () => performance.now() / 1000 };

/**
 * Keep-alive connection pools for one benchmark run (vLLM reuses one aiohttp session); call
 * `destroy()` when the run ends.
 */
export class HttpAgents {
  readonly http = new http.Agent({ keepAlive: true });
  readonly https = new https.Agent({ keepAlive: true });

  destroy(): void {
    this.http.destroy();
    this.https.destroy();
  }
}

/** Builds the JSON body of a streamed request (vLLM's payloads). */
export function requestBody(input: RequestFuncInput): Record<string, unknown> {
  const common = {
    model: input.model,
    stream: true,
    stream_options: { include_usage: true },
    ...(input.ignoreEos ? { ignore_eos: true } : {}),
  };
  const body =
    input.kind === "openai"
      ? { ...common, prompt: input.prompt, max_tokens: input.outputLen }
      : {
          ...common,
          messages: [{ role: "user", content: input.prompt }],
          max_completion_tokens: input.outputLen,
        };
  return { ...body, ...(input.extraBody ?? {}) };
}

/**
 * Sends one streamed request and times its chunks. Never throws: network and HTTP errors give
 * `success: false` with a one-line `error`.
 * @param agents connection pools to reuse (a fresh connection per request without)
 */
export async function sendStreamingRequest(
  input: RequestFuncInput,
  clock: BenchClock,
  agents?: HttpAgents,
): Promise<RequestFuncOutput> {
  const out: RequestFuncOutput = {
    success: false,
    generatedText: "",
    latency: 0,
    outputTokens: 0,
    ttft: 0,
    itl: [],
    promptLen: input.promptLen,
    error: "",
    startTime: 0,
  };
  const body = JSON.stringify(requestBody(input));
  const st = clock.now();
  out.startTime = st;
  clock.onEvent?.(input.requestId, "start", st);
  let last = st;
  let first = true;
  const onData = (data: string): void => {
    if (data === "[DONE]") return;
    const msg = JSON.parse(data) as {
      choices?: { text?: string; delta?: { content?: string } }[];
      usage?: { completion_tokens?: number; prompt_tokens?: number } | null;
    };
    if (Array.isArray(msg.choices) && msg.choices.length > 0) {
      const t = clock.now();
      clock.onEvent?.(input.requestId, "chunk", t);
      if (first) out.ttft = t - st;
      else out.itl.push(t - last);
      first = false;
      last = t;
      const c = msg.choices[0]!;
      out.generatedText += (input.kind === "openai" ? c.text : c.delta?.content) ?? "";
    } else if (msg.usage) {
      if (typeof msg.usage.completion_tokens === "number") out.outputTokens = msg.usage.completion_tokens;
      if (typeof msg.usage.prompt_tokens === "number") out.promptLen = msg.usage.prompt_tokens;
    }
  };
  try {
    await postStream(input, body, onData, agents);
    if (first) out.error = "never received a token chunk (the response had no choices)";
    else {
      out.success = true;
      out.latency = last - st;
    }
  } catch (e) {
    out.error = (e as Error).message;
  }
  return out;
}

/**
 * POSTs `body` and feeds each SSE event's data to `onData` as it arrives.
 * @throws Error with one line: connection failure, non-200 status (with the server's message),
 *   or a malformed event.
 */
function postStream(
  input: RequestFuncInput,
  body: string,
  onData: (data: string) => void,
  agents: HttpAgents | undefined,
): Promise<void> {
  const url = new URL(input.apiUrl);
  const isHttps = url.protocol === "https:";
  const headers: Record<string, string> = {
    "content-type": "application/json",
    "content-length": String(Buffer.byteLength(body)),
    accept: "text/event-stream",
  };
  if (input.apiKey !== undefined) headers.authorization = `Bearer ${input.apiKey}`;
  if (input.requestId !== undefined) headers["x-request-id"] = input.requestId;
  return new Promise<void>((resolve, reject) => {
    const req = (isHttps ? https : http).request(
      url,
      { method: "POST", headers, agent: isHttps ? agents?.https : agents?.http },
      (res) => {
        res.setEncoding("utf8");
        if (res.statusCode !== 200) {
          let text = "";
          res.on("data", (c: string) => {
            text += c;
          });
          res.on("end", () => reject(new Error(httpErrorLine(res.statusCode ?? 0, res.statusMessage, text))));
          res.on("error", reject);
          return;
        }
        const parser = new SseParser();
        const feed = (events: string[]) => {
          for (const d of events) onData(d);
        };
        res.on("data", (c: string) => {
          try {
            feed(parser.push(c));
          } catch (e) {
            req.destroy();
            reject(new Error(`malformed stream chunk (${(e as Error).message})`));
          }
        });
        res.on("end", () => {
          try {
            const rest = parser.flush();
            if (rest !== null) onData(rest);
            resolve();
          } catch (e) {
            reject(new Error(`malformed stream chunk (${(e as Error).message})`));
          }
        });
        res.on("error", reject);
      },
    );
    req.on("error", (e: NodeJS.ErrnoException) =>
      reject(new Error(`cannot reach ${url.origin} (${e.code ?? e.message})`)),
    );
    req.end(body);
  });
}

/** "HTTP 400: <message>" from an OpenAI-style error body, else the status text. */
export function httpErrorLine(status: number, statusText: string | undefined, body: string): string {
  let message = statusText ?? "";
  try {
    const j = JSON.parse(body) as { error?: { message?: unknown } | string; message?: unknown };
    const m = typeof j.error === "string" ? j.error : (j.error?.message ?? j.message);
    if (typeof m === "string" && m.length > 0) message = m;
  } catch {
    if (body.trim().length > 0) message = body.trim().split("\n")[0]!.slice(0, 200);
  }
  return `HTTP ${status}: ${message}`;
}
