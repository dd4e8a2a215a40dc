/**
 * fastify's and Node's own HTTP errors (bad URL, wrong Content-Type, body limit, malformed
 * headers, ...) turned into OpenAI-shaped replies, so a client sees one error format whatever
 * layer refused its request.
 */
import { STATUS_CODES } from "node:http";
import type { Socket } from "node:net";
import type { FastifyError, FastifyReply, FastifyRequest } from "fastify";
import { OpenAIError } from "./errors.js";

/** The only request body type the POST routes take. */
export const JSON_CONTENT_TYPE = "application/json";

/**
 * The OpenAI error for one of fastify's framework errors (its `FST_ERR_*` codes), with a
 * sentence for the user; any other 4xx keeps its status and message; null for anything else
 * (not the client's fault: the caller reports a 500).
 * @param contentType the request's Content-Type header, named in the 415 message
 */
export function fromFastifyError(err: FastifyError, contentType?: string): OpenAIError | null {
  switch (err.code) {
    case "FST_ERR_CTP_BODY_TOO_LARGE":
      return new OpenAIError(
        413,
        "the request body is larger than this server accepts (--max-request-body-bytes)",
      );
    case "FST_ERR_CTP_INVALID_MEDIA_TYPE":
    case "FST_ERR_CTP_INVALID_TYPE":
      return unsupportedMediaType(contentType);
    case "FST_ERR_CTP_INVALID_CONTENT_LENGTH":
      return new OpenAIError(400, "the request body's length does not match its Content-Length header");
    case "FST_ERR_BAD_URL":
      return new OpenAIError(400, "the request URL is not valid (it holds a malformed %-escape)");
    case "FST_ERR_MAX_PARAM_LENGTH":
      return new OpenAIError(414, "a path segment of the request URL is too long");
  }
  if (typeof err.statusCode === "number" && err.statusCode >= 400 && err.statusCode < 500) {
    return new OpenAIError(err.statusCode, err.message);
  }
  return null;
}

/** 415 naming the Content-Type that was sent (or its absence). */
export function unsupportedMediaType(contentType: string | undefined): OpenAIError {
  const got = contentType === undefined || contentType === "" ? "none" : contentType.split(";")[0]!.trim();
  return new OpenAIError(
    415,
    `the request body must be sent with Content-Type: ${JSON_CONTENT_TYPE} (got ${got})`,
    null,
  );
}

/**
 * fastify's `frameworkErrors` option: errors raised before a route is found (a URL that does
 * not decode, such as `GET /v1/%zz`), answered in OpenAI's shape.
 */
export function frameworkErrorHandler(err: FastifyError, _req: FastifyRequest, reply: FastifyReply): void {
  const e = fromFastifyError(err) ?? new OpenAIError(400, err.message);
  void reply.code(e.status).send(e.toBody());
}

/**
 * fastify's `clientErrorHandler` option: the request could not even be parsed by Node's HTTP
 * parser (malformed or oversized headers, request timeout). The reply is written to the socket
 * by hand (there is no request object), in OpenAI's shape, then the socket is closed, as
 * Node's own handler does. A reset connection gets nothing.
 */
export function clientErrorHandler(err: NodeJS.ErrnoException, socket: Socket): void {
  if (err.code === "ECONNRESET" || socket.destroyed) return;
  let e: OpenAIError;
  if (err.code === "ERR_HTTP_REQUEST_TIMEOUT")
    e = new OpenAIError(408, "the request took too long to arrive");
  else if (err.code === "HPE_HEADER_OVERFLOW")
    e = new OpenAIError(431, "the request headers are larger than this server accepts");
  else e = new OpenAIError(400, "the request is not valid HTTP (malformed request line or header)");
  const body = JSON.stringify(e.toBody());
  if (socket.writable) {
    socket.write(
      `HTTP/1.1 ${e.status} ${STATUS_CODES[e.status]}\r\nContent-Type: application/json\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy();
}
