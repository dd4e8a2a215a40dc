/**
 * Per-feature data of one step, typed per feature (CONVENTIONS.md 9: optional features ride on
 * hooks). `SchedulerOutput.extensions` (core -> worker), `ModelRunnerOutput.extensions`
 * (worker -> core) and `AttentionMetadata.extensions` (worker -> attention backend) are
 * {@link ExtensionData}: each feature reads and writes its entries through its own
 * {@link ExtensionKey}, whose type parameter fixes the entry's type, so readers need no casts.
 *
 * At run time an ExtensionData is a plain `Map` from the key's name to the entry, and every entry
 * of the scheduler's and the model runner's outputs is plain data (numbers, strings, arrays,
 * objects): both cross to the worker thread by structured clone (engine/executor.ts
 * ThreadExecutor, worker/thread_main.ts) and arrive as the same Map. A leaf module: it imports
 * nothing, so every layer may use it.
 */

declare const entryType: unique symbol;

/**
 * Names one feature's entry of an {@link ExtensionData} and fixes its type `T`. At run time the
 * name itself (the Map key). One key per feature and carrier: entries of different types get
 * different names (`extensionKey`), so one name is never read as two types.
 */
export type ExtensionKey<T> = string & { readonly [entryType]: (entry: T) => T };

/** The key named `name` for entries of type `T` (declare it once, beside the entry's type). */
export function extensionKey<T>(name: string): ExtensionKey<T> {
  return name as ExtensionKey<T>;
}

/** A step's per-feature entries, read and written through their keys (see the file comment). */
export interface ExtensionData extends Map<string, unknown> {
  /** The entry under `key`, undefined when the feature stored none this step. */
  get<T>(key: ExtensionKey<T>): T | undefined;
  set<T>(key: ExtensionKey<T>, entry: T): this;
  has(key: ExtensionKey<unknown>): boolean;
}

/** An empty ExtensionData. */
export function newExtensionData(): ExtensionData {
  return new Map<string, unknown>() as ExtensionData;
}
