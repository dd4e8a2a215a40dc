import { createHash, timingSafeEqual } from "node:crypto";
import { OpenAIError } from "./errors.js";

/** Path prefix of the routes that need the API key; /health, /version and /metrics stay open (as in vLLM). */
export const PROTECTED_PREFIX = "/v1";

const sha256 = (s: string) => createHash("sha256").update(s, "utf8").digest();

/**
 * Checks `Authorization: Bearer <key>` against the server's key. Both sides are hashed to
 * SHA-256 first, so `crypto.timingSafeEqual` compares equal-length buffers and the time taken
 * reveals neither the key's length nor how much of it matched.
 */
export class ApiKeyAuth {
  private readonly keyHash: Buffer;

  /** @throws Error when the key is empty. */
  constructor(apiKey: string) {
    if (apiKey.length === 0) throw new Error("the API key must not be empty");
    this.keyHash = sha256(apiKey);
  }

  /** True when the header carries the key (scheme "Bearer", case-insensitive). */
  accepts(authorization: string | undefined): boolean {
    const m = /^Bearer\s+(.+)$/i.exec(authorization?.trim() ?? "");
    const given = sha256(m?.[1] ?? "");
    // Compare even when the header is malformed, so both paths take the same time.
    return timingSafeEqual(given, this.keyHash) && m !== null;
  }

  /**
   * Checks a request.
   * @param path the URL path (query included is fine)
   * @throws OpenAIError 401 with OpenAI's shape for a wrong key (`invalid_request_error`,
   *   code `invalid_api_key`) when the path is protected and the key is missing or wrong.
   */
  check(path: string, authorization: string | undefined): void {
    if (!isProtected(path) || this.accepts(authorization)) return;
    throw new OpenAIError(
      401,
      authorization === undefined
        ? "You didn't provide an API key; send it as Authorization: Bearer <key>."
        : "Incorrect API key provided.",
      null,
      "invalid_request_error",
      "invalid_api_key",
    );
  }
}

/** True for /v1 and everything under it. */
export function isProtected(path: string): boolean {
  const p = path.split("?")[0] ?? "";
  return p === PROTECTED_PREFIX || p.startsWith(`${PROTECTED_PREFIX}/`);
}
