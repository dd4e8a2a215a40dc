/**
 * The one field list of the addon's named parameter objects (src/backends/cuda/addon_params.ts)
 * against its two other places: the C structs it describes (native/kernels/*.h) and the readers
 * generated from it (native/addon/params.gen.h, by scripts/gen_native_params.ts). Drift in
 * either fails here, so TS, the readers and the kernels' structs always name the same fields in
 * the same order. Also: the addon functions read their objects through the generated readers,
 * and the fake addon refuses objects the addon would refuse.
 */
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import {
  expectedMembers,
  PARAMS_HEADER,
  parseCStruct,
  renderParamsHeader,
} from "../../../../scripts/gen_native_params.js";
import { defaultAddonPath, type HisparseNative, loadAddon } from "../../../../src/backends/cuda/addon.js";
import {
  NATIVE_PARAM_STRUCTS,
  PAGED_ATTENTION_PARAMS,
  type ParamKind,
  type ParamStruct,
  QUEST_SELECT_PARAMS,
  RESOLVE_PARAMS,
  SPARSE_DECODE_PARAMS,
} from "../../../../src/backends/cuda/addon_params.js";
import { checkParams } from "./fake_params.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../../../..");
const read = (path: string) => readFileSync(join(root, path), "utf8");

describe("addon parameter structs: one field list", () => {
  it("every C struct declares exactly the listed fields, in order, with matching kinds", () => {
    for (const s of NATIVE_PARAM_STRUCTS)
      assert.deepEqual(
        parseCStruct(read(s.header), s.struct),
        expectedMembers(s),
        `${s.struct} in ${s.header}`,
      );
  });

  it("native/addon/params.gen.h is what scripts/gen_native_params.ts generates from the list", () => {
    assert.equal(
      read(PARAMS_HEADER),
      renderParamsHeader(),
      `${PARAMS_HEADER} is stale: run node --import tsx scripts/gen_native_params.ts`,
    );
  });

  it("the C struct reader sees through comments and refuses members without a kind", () => {
    const src = `/** x */ typedef struct HsXParams {
      /** a pointer */ const int32_t* rows; // trailing
      int n; size_t bytes; float scale; HsYParams base;
    } HsXParams;
    typedef struct HsBadParams { double d; } HsBadParams;`;
    assert.deepEqual(parseCStruct(src, "HsXParams"), [
      { name: "rows", kind: "ptr" },
      { name: "n", kind: "i32" },
      { name: "bytes", kind: "size" },
      { name: "scale", kind: "f32" },
      { name: "base", struct: "HsYParams" },
    ]);
    assert.throws(() => parseCStruct(src, "HsBadParams"), /type double has no parameter kind/);
    assert.throws(() => parseCStruct(src, "HsNoParams"), /not found/);
  });

  it("the addon reads every parameter object through the generated readers, not by position", () => {
    const hisparse = read("native/addon/hisparse.cc");
    const attention = read("native/addon/attention.cc");
    for (const [src, fn] of [
      [hisparse, "questSelect"],
      [hisparse, "resolve"],
      [hisparse, "sparseDecodeAttention"],
      [attention, "pagedDecodeAttention"],
      [attention, "pagedPrefillAttention"],
    ] as const)
      assert.match(src, new RegExp(`readParams\\(ParamObject\\(info, 1, "${fn}"\\), p\\);`), fn);
  });

  it("the fake addon, like the addon, refuses a missing, mistyped or unknown field", () => {
    const ok = Object.fromEntries(QUEST_SELECT_PARAMS.fields.map(([n]) => [n, 8]));
    assert.deepEqual(checkParams("questSelect", QUEST_SELECT_PARAMS, ok), ok);
    const { seqLens: _, ...missing } = ok;
    assert.throws(
      () => checkParams("questSelect", QUEST_SELECT_PARAMS, missing),
      /params.seqLens must be a number/,
    );
    assert.throws(
      () => checkParams("questSelect", QUEST_SELECT_PARAMS, { ...ok, numReqs: 2 ** 31 }),
      /params.numReqs must be an int32 integer/,
    );
    assert.throws(
      () => checkParams("questSelect", QUEST_SELECT_PARAMS, { ...ok, qkv: -16 }),
      /params.qkv must be a non-negative integer/,
    );
    assert.throws(
      () => checkParams("resolve", RESOLVE_PARAMS, { ...ok }),
      /params.qkv is not a field of HsResolveParams/,
    );
  });
});

/** Every field of a struct, its base's first. */
function allFields(s: ParamStruct): (readonly [string, ParamKind])[] {
  return [...(s.base === undefined ? [] : allFields(s.base)), ...s.fields];
}

/** A value of each kind that the addon refuses, and the words of its TypeError. */
const BAD: Record<ParamKind, [unknown, RegExp]> = {
  ptr: [-256, /must be an address/],
  i32: [2 ** 31, /must be an int32 integer/],
  size: [0.5, /must be a non-negative integer/],
  f32: ["1", /must be a number/],
};

describe("the built addon reads the listed fields (no GPU needed: every call throws before its launch)", {
  skip: existsSync(defaultAddonPath()) ? false : "the addon is not built (npm run build:native)",
}, () => {
  it("a missing or mistyped field of each struct is named in a TypeError, in list order", () => {
    const addon = loadAddon();
    const calls: Array<[ParamStruct, string, (a: HisparseNative, p: object) => void]> = [
      [PAGED_ATTENTION_PARAMS, "pagedDecodeAttention", (a, p) => a.pagedDecodeAttention(0, p as never)],
      [PAGED_ATTENTION_PARAMS, "pagedPrefillAttention", (a, p) => a.pagedPrefillAttention(0, p as never, 1)],
      [SPARSE_DECODE_PARAMS, "sparseDecodeAttention", (a, p) => a.sparseDecodeAttention(0, p as never)],
      [QUEST_SELECT_PARAMS, "questSelect", (a, p) => a.questSelect(0, p as never)],
      [RESOLVE_PARAMS, "resolve", (a, p) => a.resolve(0, p as never)],
    ];
    for (const [spec, fn, call] of calls) {
      const fields = allFields(spec);
      const full = Object.fromEntries(fields.map(([n]) => [n, 0]));
      for (const [name, kind] of fields) {
        const { [name]: _, ...missing } = full;
        assert.throws(
          () => call(addon, missing),
          new RegExp(`^TypeError: ${fn}: params\\.${name} must be a number`),
        );
        const [value, words] = BAD[kind];
        assert.throws(
          () => call(addon, { ...full, [name]: value }),
          (e: Error) =>
            e instanceof TypeError && e.message.startsWith(`${fn}: params.${name} `) && words.test(e.message),
          `${fn} ${name}`,
        );
      }
    }
  });
});
