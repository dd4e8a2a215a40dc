// The TokenizerPool's thread entry when hisparse runs from its TypeScript sources (tsx, as in
// `npm test` or a checkout without a build): registers tsx in this thread, then hands piscina
// the handler of tokenizer_worker.ts. Built packages load dist/.../tokenizer_worker.js directly.
const { register } = await import("tsx/esm/api");
register();
const mod = await import(new URL("./tokenizer_worker.ts", import.meta.url).href);
export default mod.default;
