/**
 * The API key guards every route under /v1 however the client spells the path: the router
 * decodes percent-escapes before matching, so the key check must look at the route that
 * matched, not only at the raw URL.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { pino } from "pino";
import { buildApp } from "../../../src/server/app.js";
import type { ServingContext } from "../../../src/server/context.js";

/** The little of a ServingContext that /v1/models and /health read. */
const ctx = {
  engineError: null,
  modelName: "m",
  maxModelLen: 8,
  metrics: null,
  created: () => 0,
  checkModel: () => {},
  modelRoot: "m",
} as unknown as ServingContext;

describe("API key on /v1 routes reached through encoded paths", () => {
  const app = buildApp(ctx, { apiKey: "k", logger: pino({ level: "silent" }), version: "t" });
  before(() => app.ready());
  after(() => app.close());

  it("GET /v1/models: 401 without the key, 200 with it (the plain spelling)", async () => {
    assert.equal((await app.inject({ method: "GET", url: "/v1/models" })).statusCode, 401);
    const ok = await app.inject({ method: "GET", url: "/v1/models", headers: { authorization: "Bearer k" } });
    assert.equal(ok.statusCode, 200);
  });

  it("GET /%76%31/models (= /v1/models once decoded): 401 without the key, 200 with it", async () => {
    const denied = await app.inject({ method: "GET", url: "/%76%31/models" });
    assert.equal(denied.statusCode, 401);
    assert.equal(denied.json().error.code, "invalid_api_key");
    const ok = await app.inject({
      method: "GET",
      url: "/%76%31/models",
      headers: { authorization: "Bearer k" },
    });
    assert.equal(ok.statusCode, 200);
    assert.equal(ok.json().data[0].id, "m");
  });

  it("GET /v%31/models/m and POST /%76%31/completions: 401 without the key", async () => {
    assert.equal((await app.inject({ method: "GET", url: "/v%31/models/m" })).statusCode, 401);
    const post = await app.inject({ method: "POST", url: "/%76%31/completions", payload: { prompt: "x" } });
    assert.equal(post.statusCode, 401);
  });

  it("/health stays open, also when encoded (/%68ealth)", async () => {
    assert.equal((await app.inject({ method: "GET", url: "/health" })).statusCode, 200);
    assert.equal((await app.inject({ method: "GET", url: "/%68ealth" })).statusCode, 200);
  });
});
