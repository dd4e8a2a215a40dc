import type { z } from "zod";
import { EngineInputError } from "../engine/llm_engine.js";
import { TokenizerError } from "../tokenizer/errors.js";

/**
 * The body of every error reply, in OpenAI's shape:
 * `{"error": {"message", "type", "param", "code"}}`. `type` follows vLLM's ErrorResponse
 * (the OpenAI client's exception class names: "BadRequestError", "NotFoundError", ...), except
 * for a wrong API key, which uses OpenAI's own `invalid_request_error` / `invalid_api_key`.
 * `code` is the HTTP status (as vLLM sends it) unless a string code applies.
 */
export interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: number | string | null };
}

/** HTTP statuses this server answers errors with, and their vLLM-style error types. */
export const ERROR_TYPES: Readonly<Record<number, string>> = {
  400: "BadRequestError",
  401: "invalid_request_error",
  404: "NotFoundError",
  405: "MethodNotAllowedError",
  408: "RequestTimeoutError",
  413: "RequestEntityTooLargeError",
  414: "URITooLongError",
  415: "UnsupportedMediaTypeError",
  422: "UnprocessableEntityError",
  431: "RequestHeaderFieldsTooLargeError",
  500: "InternalServerError",
  503: "ServiceUnavailableError",
};

/**
 * An error meant for the client: one sentence, an HTTP status, and the request field at fault.
 * Thrown anywhere in request handling; the error handler turns it into {@link ErrorBody}.
 */
export class OpenAIError extends Error {
  override name = "OpenAIError";
  constructor(
    /** HTTP status (4xx/5xx). */
    readonly status: number,
    message: string,
    /** The request field at fault (OpenAI `param`), if one is. */
    readonly param: string | null = null,
    /** Overrides the status-derived type (e.g. OpenAI's `invalid_request_error`). */
    readonly type: string = ERROR_TYPES[status] ??
      (status >= 500 ? "InternalServerError" : "BadRequestError"),
    /** Overrides the numeric code (e.g. "invalid_api_key"). */
    readonly code: number | string | null = status,
  ) {
    super(message);
  }

  /** The JSON body of this error. */
  toBody(): ErrorBody {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

/** 400 with a field name. */
export function badRequest(message: string, param: string | null = null): OpenAIError {
  return new OpenAIError(400, message, param);
}

/**
 * Turns a zod validation failure into a 400 naming the first bad field, e.g.
 * "max_tokens: Invalid input: expected int, received string", or "prompt is required" when the
 * field is absent from `input`. Union failures are resolved to the branch that matched the
 * input's type (so a bad content part is reported as such).
 */
export function fromZodError(err: z.ZodError, input?: unknown): OpenAIError {
  const issue = err.issues[0];
  if (issue === undefined) return badRequest("the request body is invalid");
  const { path, message } = describeIssue(issue, []);
  const param = path.length > 0 ? formatPath(path) : null;
  if (param !== null && input !== undefined && valueAt(input, path) === undefined) {
    return badRequest(`${param} is required`, param);
  }
  return badRequest(`${param ?? "request body"}: ${message}`, param);
}

/** The value at a zod path inside a parsed JSON value (undefined when absent). */
function valueAt(input: unknown, path: readonly PropertyKey[]): unknown {
  let v: unknown = input;
  for (const p of path) {
    if (v === null || typeof v !== "object") return undefined;
    v = (v as Record<PropertyKey, unknown>)[p];
  }
  return v;
}

/** The deepest useful (path, message) of one zod issue. */
function describeIssue(
  issue: z.core.$ZodIssue,
  base: readonly PropertyKey[],
): { path: PropertyKey[]; message: string } {
  const path = [...base, ...issue.path];
  if (issue.code !== "invalid_union") return { path, message: issue.message };
  // A branch whose issues are not all "wrong type at the root" matched the input's shape; of
  // those, the one that got furthest into the input before failing names the offending element
  // (prompt [1, "a"] fails the token-id branch at [1], not the text-batch branch at [0]).
  const branches = issue.errors.filter(
    (b) => b.length > 0 && !b.every((i) => i.code === "invalid_type" && i.path.length === 0),
  );
  let first: z.core.$ZodIssue | undefined;
  for (const b of branches) if (first === undefined || furtherThan(b[0]!.path, first.path)) first = b[0];
  if (first !== undefined) return describeIssue(first, path);
  const expected = issue.errors
    .flatMap((b) => b.map((i) => (i.code === "invalid_type" ? i.expected : null)))
    .filter((x): x is NonNullable<typeof x> => x !== null);
  return {
    path,
    message:
      expected.length > 0 ? `Invalid input: expected ${[...new Set(expected)].join(" or ")}` : issue.message,
  };
}

/** Whether zod path a lies further into the input than b: a larger index first, else deeper. */
function furtherThan(a: readonly PropertyKey[], b: readonly PropertyKey[]): boolean {
  for (let i = 0; i < Math.min(a.length, b.length); i++) {
    const x = a[i];
    const y = b[i];
    if (x === y) continue;
    return typeof x === "number" && typeof y === "number" && x > y;
  }
  return a.length > b.length;
}

/** `messages[0].content` style path of a zod issue. */
function formatPath(path: readonly PropertyKey[]): string {
  let s = "";
  for (const p of path) s += typeof p === "number" ? `[${p}]` : s.length === 0 ? String(p) : `.${String(p)}`;
  return s;
}

/**
 * Maps any error raised while handling a request onto an {@link OpenAIError}: engine input
 * errors and tokenizer (chat template) errors are the client's (400); anything else is a 500
 * whose message is kept (it is one sentence by the project's conventions).
 */
export function toOpenAIError(e: unknown): OpenAIError {
  if (e instanceof OpenAIError) return e;
  if (e instanceof EngineInputError) return badRequest(e.message, e.param);
  if (e instanceof TokenizerError) return badRequest(e.message, "messages");
  const msg = e instanceof Error ? e.message : String(e);
  return new OpenAIError(500, msg);
}
