/**
 * The fake addon's check of a named parameter object (fake_addon.ts): what the addon's generated
 * readers (native/addon/params.gen.h) require of it, from the same field lists
 * (src/backends/cuda/addon_params.ts), plus no field the struct lacks (TS object literals are
 * checked for excess properties; this also catches spreads).
 */
import type { ParamStruct } from "../../../../src/backends/cuda/addon.js";

/** The fields of a parameter struct, its base's first. */
function fieldsOf(spec: ParamStruct): (readonly [string, string])[] {
  return [...(spec.base === undefined ? [] : fieldsOf(spec.base)), ...spec.fields];
}

/**
 * Checks a parameter object as native/addon/params.gen.h reads it.
 * @throws TypeError naming the launcher and the field, as the addon does.
 */
export function checkParams(fn: string, spec: ParamStruct, params: unknown): Record<string, number> {
  if (typeof params !== "object" || params === null) throw new TypeError(`${fn}: params must be an object`);
  const o = params as Record<string, unknown>;
  const fields = fieldsOf(spec);
  const names = new Set(fields.map(([n]) => n));
  for (const k of Object.keys(o))
    if (!names.has(k)) throw new TypeError(`${fn}: params.${k} is not a field of ${spec.struct}`);
  for (const [name, kind] of fields) {
    const v = o[name];
    if (typeof v !== "number") throw new TypeError(`${fn}: params.${name} must be a number`);
    const integer = Number.isInteger(v);
    if ((kind === "ptr" || kind === "size") && !(integer && v >= 0 && v < 2 ** 53))
      throw new TypeError(`${fn}: params.${name} must be a non-negative integer`);
    if (kind === "i32" && !(integer && v >= -(2 ** 31) && v < 2 ** 31))
      throw new TypeError(`${fn}: params.${name} must be an int32 integer`);
  }
  return { ...(o as Record<string, number>) };
}
