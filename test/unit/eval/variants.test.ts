/** `--compare` specs: shell-like splitting and the NAME: FLAGS forms. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { parseVariantSpec, parseVariantSpecs, shellSplit } from "../../../src/eval/variants.js";

describe("eval variants", () => {
  it("splits flags like a shell", () => {
    assert.deepEqual(shellSplit("  --a 1   --b "), ["--a", "1", "--b"]);
    assert.deepEqual(shellSplit(`--hisparse-config '{"topk": 256}'`), ["--hisparse-config", '{"topk": 256}']);
    assert.deepEqual(shellSplit(`--x "a \\"b\\" c" d\\ e`), ["--x", 'a "b" c', "d e"]);
    assert.deepEqual(shellSplit("''"), [""]);
    assert.throws(() => shellSplit("--x 'open"), /unterminated ' quote/);
  });

  it("NAME: FLAGS, bare FLAGS and bare NAME", () => {
    assert.deepEqual(parseVariantSpec("topk256: --enable-hybrid-sparse on --hybrid-sparse-topk 256"), {
      name: "topk256",
      argv: ["--enable-hybrid-sparse", "on", "--hybrid-sparse-topk", "256"],
    });
    assert.deepEqual(parseVariantSpec("--block-size 8"), {
      name: "--block-size 8",
      argv: ["--block-size", "8"],
    });
    assert.deepEqual(parseVariantSpec("dense"), { name: "dense", argv: [] });
    assert.deepEqual(parseVariantSpec("base:"), { name: "base", argv: [] });
    assert.throws(
      () => parseVariantSpec("dense and more"),
      /flags must start with --, or name the variant as NAME: FLAGS/,
    );
  });

  it("no specs is one default variant; names must be unique", () => {
    assert.deepEqual(parseVariantSpecs(undefined), [{ name: "default", argv: [] }]);
    assert.throws(
      () => parseVariantSpecs(["a: --seed 1", "a: --seed 2"]),
      /two --compare variants are named "a"/,
    );
  });
});
