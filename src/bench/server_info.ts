/** What a benchmark asks a server before it starts: that it answers, and its model name. */

/** Error for a server that cannot be used; the message is one sentence for the user. */
export class ServerUnreachableError extends Error {
  override name = "ServerUnreachableError";
}

/** Seconds to wait for `/v1/models`. */
const MODELS_TIMEOUT_S = 30;

/**
 * GETs `<baseUrl>/v1/models` (vLLM's get_first_model_from_server).
 * @returns the first model id, or null when the server has no such route (HTTP 404)
 * @throws ServerUnreachableError when the server cannot be reached, times out, refuses the key,
 *   or answers something that is not a model list.
 */
export async function fetchFirstModel(baseUrl: string, apiKey?: string): Promise<string | null> {
  const url = `${baseUrl.replace(/\/+$/, "")}/v1/models`;
  let res: Response;
  try {
    res = await fetch(url, {
      headers: apiKey === undefined ? {} : { authorization: `Bearer ${apiKey}` },
      signal: AbortSignal.timeout(MODELS_TIMEOUT_S * 1000),
    });
  } catch (e) {
    const err = e as Error & { cause?: { code?: string; message?: string } };
    const why =
      err.name === "TimeoutError"
        ? `no answer in ${MODELS_TIMEOUT_S} s`
        : (err.cause?.code ?? err.cause?.message ?? err.message);
    throw new ServerUnreachableError(`cannot reach ${baseUrl} (${why})`);
  }
  if (res.status === 404) return null;
  if (res.status === 401 || res.status === 403)
    throw new ServerUnreachableError(`${url} refused the request (HTTP ${res.status}); pass --api-key`);
  if (!res.ok) throw new ServerUnreachableError(`${url} answered HTTP ${res.status}`);
  const body = (await res.json().catch(() => null)) as { data?: { id?: unknown }[] } | null;
  const id = body?.data?.[0]?.id;
  if (typeof id !== "string") throw new ServerUnreachableError(`${url} lists no model; pass --model NAME`);
  return id;
}
