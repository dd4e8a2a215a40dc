import Fastify, {
  type FastifyBaseLogger,
  type FastifyError,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
} from "fastify";
import { ApiKeyAuth } from "./auth.js";
import type { ServingContext } from "./context.js";
import { badRequest, OpenAIError, toOpenAIError } from "./errors.js";
import {
  clientErrorHandler,
  frameworkErrorHandler,
  fromFastifyError,
  JSON_CONTENT_TYPE,
  unsupportedMediaType,
} from "./framework_errors.js";
import { serveChat } from "./serving_chat.js";
import { serveCompletion } from "./serving_completion.js";
import { servePreheat } from "./serving_preheat.js";

/** Default request-body limit in bytes (4 MiB: a 16K-token prompt is well under 100 KiB). */
export const DEFAULT_MAX_REQUEST_BODY_BYTES = 4 * 2 ** 20;

/** Options of {@link buildApp}. */
export interface AppOptions {
  /** Bearer key required on /v1 routes; null or undefined = no authentication. */
  apiKey?: string | null;
  /** Largest accepted request body in bytes (larger ones get 413). */
  maxRequestBodyBytes?: number;
  logger: FastifyBaseLogger;
  /** Reported by GET /version. */
  version: string;
}

/**
 * The OpenAI-compatible HTTP app (fastify): /v1/completions, /v1/chat/completions, /v1/models,
 * /health, /version, /metrics, and our /v1/preheat. Every error is sent in OpenAI's shape ({@link OpenAIError}),
 * fastify's and Node's own included (bad URL, malformed headers, body limit).
 * POST bodies must be sent as `Content-Type: application/json` (anything else, `text/plain`
 * and form bodies included, gets 415 before the body is read: browsers send those cross-origin
 * without a CORS preflight, so accepting them would let any web page drive a local server);
 * they are read as bytes and must be UTF-8 and JSON; larger than the limit -> 413.
 */
export function buildApp(ctx: ServingContext, o: AppOptions): FastifyInstance {
  const app = Fastify({
    // fastify's own lines (one per request, "Server listening") only from warn up; the server
    // prints its ready line and errors itself.
    loggerInstance: o.logger.child({}, { level: maxLevel(o.logger.level, "warn") }),
    bodyLimit: o.maxRequestBodyBytes ?? DEFAULT_MAX_REQUEST_BODY_BYTES,
    // close() drops every connection, including opened-but-unused ones that would otherwise
    // hold shutdown until the client's keep-alive timeout; requests are aborted and drained first.
    forceCloseConnections: true,
    frameworkErrors: frameworkErrorHandler,
    clientErrorHandler,
  });
  installBodyParser(app);
  const auth = o.apiKey == null ? null : new ApiKeyAuth(o.apiKey);
  if (auth !== null) {
    // The router matches the percent-decoded path (`/%76%31/models` reaches /v1/models), so the
    // key is checked against the route that matched; the raw URL only when none did (404).
    app.addHook("onRequest", async (req) =>
      auth.check(req.routeOptions.url ?? req.url, req.headers.authorization),
    );
  }
  app.setErrorHandler((err: FastifyError | OpenAIError, req, reply) => sendError(err, req, reply));
  app.setNotFoundHandler((req, reply) => {
    const path = req.url.split("?")[0]!;
    // A path served under other methods (GET /v1/preheat): 405 with the Allow header (RFC 9110).
    const allow = ROUTE_METHODS.filter((method) => app.hasRoute({ method, url: path }));
    if (allow.length > 0) {
      const e = new OpenAIError(405, `${req.method} ${path} is not allowed: use ${allow.join(" or ")}.`);
      return reply.code(405).header("allow", allow.join(", ")).send(e.toBody());
    }
    const e = new OpenAIError(404, `There is no route ${req.method} ${path}.`);
    return reply.code(404).send(e.toBody());
  });

  app.get("/health", async (_req, reply) => {
    if (ctx.engineError !== null) {
      throw new OpenAIError(503, `the engine failed: ${ctx.engineError.message}`);
    }
    return reply.code(200).send();
  });
  app.get("/version", async () => ({ version: o.version }));
  const modelCard = () => ({
    id: ctx.modelName,
    object: "model",
    created: ctx.created(),
    owned_by: "hisparse",
    root: ctx.modelRoot,
    parent: null,
    max_model_len: ctx.maxModelLen,
  });
  app.get("/v1/models", async () => ({ object: "list", data: [modelCard()] }));
  app.get<{ Params: { model: string } }>("/v1/models/:model", async (req) => {
    ctx.checkModel(req.params.model);
    return modelCard();
  });
  app.get("/metrics", async (_req, reply) => {
    if (ctx.metrics === null) throw new OpenAIError(404, "metrics are disabled on this server");
    return reply.type(ctx.metrics.contentType).send(await ctx.metrics.metrics());
  });
  app.post("/v1/completions", (req, reply) => serveCompletion(ctx, jsonBody(req), reply));
  app.post("/v1/chat/completions", (req, reply) => serveChat(ctx, jsonBody(req), reply));
  app.post("/v1/preheat", (req, reply) => servePreheat(ctx, jsonBody(req), reply));
  return app;
}

/** Methods the 405 answer looks for on a path that did not match its request's method. */
const ROUTE_METHODS = ["GET", "HEAD", "POST"] as const;

/**
 * The parsed JSON body of a POST. fastify skips the parsers for a request with neither a body
 * nor a Content-Type: that one is refused as any other non-JSON body.
 * @throws OpenAIError 415 when there is no body and no Content-Type.
 */
function jsonBody(req: FastifyRequest): unknown {
  if (req.body === undefined) throw unsupportedMediaType(req.headers["content-type"]);
  return req.body;
}

/** The stricter (higher) of two pino level names. */
function maxLevel(a: string, b: string): string {
  const order = ["trace", "debug", "info", "warn", "error", "fatal", "silent"];
  return order.indexOf(a) > order.indexOf(b) ? a : b;
}

/**
 * Replaces fastify's parsers with one for `application/json` (any parameters, e.g. a
 * charset): bytes -> UTF-8 (fatal on bad bytes) -> JSON through fastify's own parser (which
 * rejects prototype poisoning). Other content types find no parser: fastify refuses them with
 * FST_ERR_CTP_INVALID_MEDIA_TYPE (415) before reading the body.
 */
function installBodyParser(app: FastifyInstance): void {
  const json = app.getDefaultJsonParser("error", "error");
  const utf8 = new TextDecoder("utf-8", { fatal: true });
  app.removeAllContentTypeParsers();
  app.addContentTypeParser(JSON_CONTENT_TYPE, { parseAs: "buffer" }, (req, body, done) => {
    let text: string;
    try {
      text = utf8.decode(body as Buffer);
    } catch {
      done(badRequest("the request body is not valid UTF-8"), undefined);
      return;
    }
    if (text.trim().length === 0) {
      done(badRequest("the request body is empty; send a JSON object"), undefined);
      return;
    }
    json(req, text, (err, value) => {
      if (err !== null) done(badRequest(`the request body is not valid JSON (${err.message})`), undefined);
      else done(null, value);
    });
  });
}

/** Sends any error in OpenAI's shape: OpenAIError as is, fastify's 4xx with their status, else 500. */
function sendError(err: FastifyError | OpenAIError, req: FastifyRequest, reply: FastifyReply): FastifyReply {
  const e =
    err instanceof OpenAIError
      ? err
      : (fromFastifyError(err, req.headers["content-type"]) ?? toOpenAIError(err));
  // Expected refusals (503 overload, engine gone) are warnings without a stack; unexpected
  // failures are errors with one.
  if (e.status === 503 && err instanceof OpenAIError) req.log.warn(`${req.method} ${req.url}: ${e.message}`);
  else if (e.status >= 500) req.log.error({ err }, `${req.method} ${req.url} failed: ${e.message}`);
  return reply.code(e.status).send(e.toBody());
}
