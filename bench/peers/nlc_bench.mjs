// The peer side of bench/peers (README.md there): node-llama-cpp 3.21.1 (llama.cpp through its
// prebuilt binaries) on a GGUF model. Runs from a folder holding node-llama-cpp's node_modules
// (the unpacked kit on the GPU machine, .peer/nlc here), not from the project's build:
//   node nlc_bench.mjs --model /tmp/llama8b.gguf [--gpu cuda|false|auto] [--single-p 1024,8192,32768]
//        [--n 128] [--batched-p 1024,8192] [--b 32,64] [--batched-n 128] [--batch-size 2048]
//        [--deadline-s 420] [--out results.jsonl] [--summary summary.json] [--log-level warn]
//
// (a) batch-1: for each P, a fresh context of one sequence; a prompt of P random token ids is
//     evaluated and the first token sampled (prefill = time to first token), then N more tokens
//     are generated one at a time, EOS ignored; the first decode step is untimed, then
//     decode tok/s = N / time of the next N steps.
// (b) batched: for each (P, B), a context with `sequences: B`; each sequence gets its own prompt
//     of P random ids, all prefill together (B*P tokens), then all B decode N tokens concurrently
//     (one llama_decode of B tokens per step, as node-llama-cpp batches pending sequences);
//     aggregate decode tok/s = B*N / time of N steps (after one untimed step).
// Sampling is greedy (temperature 0) inside the addon; no chat wrapper, no detokenization.
// One JSON line per measurement on stdout (and --out), then a summary JSON line.
import fs from "node:fs";
import os from "node:os";
import process from "node:process";
import { performance } from "node:perf_hooks";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const argv = process.argv.slice(2);
function opt(name, def) {
    const i = argv.indexOf("--" + name);
    if (i < 0) return def;
    const v = argv[i + 1];
    if (v == null || v.startsWith("--")) return "true";
    return v;
}
const list = (s) => String(s).split(",").map((x) => x.trim()).filter(Boolean).map(Number);

const modelPath = opt("model");
if (!modelPath) {
    console.error("usage: node nlc_bench.mjs --model FILE.gguf [--gpu cuda|false|auto] ...");
    process.exit(2);
}
const gpuOpt = opt("gpu", "cuda");
const gpu = gpuOpt === "false" ? false : gpuOpt;
const singleP = list(opt("single-p", "1024,8192,32768"));
const N = Number(opt("n", 128));
const batchedP = list(opt("batched-p", "1024,8192"));
const batchedB = list(opt("b", "32,64"));
const batchedN = Number(opt("batched-n", N));
const batchSize = Number(opt("batch-size", 2048));
const deadlineS = Number(opt("deadline-s", 1e9));
const warmupTokens = Number(opt("warmup", 2048));
const outPath = opt("out", null);
const summaryPath = opt("summary", null);
const logLevel = opt("log-level", "warn");
const threads = opt("threads", null);
const vocabLimit = Number(opt("vocab-limit", 128000)); // random ids below the special tokens
const ignoreMemChecks = opt("ignore-memory-checks", "true") !== "false";
const nlcVersion = (() => {
    try {
        return JSON.parse(fs.readFileSync("node_modules/node-llama-cpp/package.json", "utf8")).version;
    } catch {
        return null;
    }
})();
const tStart = performance.now();
const elapsed = () => (performance.now() - tStart) / 1000;

const results = [];
function emit(obj) {
    const line = JSON.stringify({ t: +elapsed().toFixed(2), ...obj });
    console.log(line);
    if (outPath) fs.appendFileSync(outPath, line + "\n");
    results.push(obj);
}
const r2 = (x) => Math.round(x * 100) / 100;

// deterministic random token ids (mulberry32)
function rngFrom(seed) {
    let a = seed >>> 0;
    return () => {
        a = (a + 0x6D2B79F5) >>> 0;
        let t = a;
        t = Math.imul(t ^ (t >>> 15), t | 1);
        t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
        return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
}
function randomTokens(n, seed) {
    const r = rngFrom(seed);
    const out = new Array(n);
    for (let i = 0; i < n; i++) out[i] = 1 + Math.floor(r() * (vocabLimit - 1));
    return out;
}
const evalOpts = { temperature: 0, yieldEogToken: true };

async function vram(llama) {
    try {
        const v = await llama.getVramState();
        return { total_gib: r2(v.total / 2 ** 30), used_gib: r2(v.used / 2 ** 30), free_gib: r2(v.free / 2 ** 30) };
    } catch (e) {
        return { error: String(e) };
    }
}

async function main() {
    let t = performance.now();
    const llama = await getLlama({
        gpu,
        build: "never",          // never build llama.cpp from source
        skipDownload: true,      // never download llama.cpp sources
        usePrebuiltBinaries: true,
        progressLogs: false,
        logLevel: LlamaLogLevel[logLevel] ?? logLevel,
        ...(threads != null ? { maxThreads: Number(threads) } : {}),
    });
    const env = {
        node: process.version,
        gpu: llama.gpu,
        buildType: llama.buildType,
        llamaCpp: llama.llamaCppRelease,
        gpuNames: await llama.getGpuDeviceNames().catch(() => []),
        cpuMathCores: llama.cpuMathCores,
        host_cpus: os.cpus().length,
        host_cpu: os.cpus()[0]?.model,
        systemInfo: llama.systemInfo,
    };
    emit({ phase: "getLlama", s: r2((performance.now() - t) / 1000), ...env, vram: await vram(llama) });
    if (gpu && llama.gpu !== gpu && gpu !== "auto") throw new Error(`asked for gpu ${gpu}, got ${llama.gpu}`);

    t = performance.now();
    const model = await llama.loadModel({
        modelPath,
        gpuLayers: llama.gpu ? "max" : 0,
        defaultContextFlashAttention: true,
        useMmap: true,
    });
    const nLayers = model.fileInfo?.metadata?.llama?.block_count;
    const nKv = model.fileInfo?.metadata?.llama?.attention?.head_count_kv;
    const nHead = model.fileInfo?.metadata?.llama?.attention?.head_count;
    const nEmbd = model.fileInfo?.metadata?.llama?.embedding_length;
    const headDim = model.fileInfo?.metadata?.llama?.attention?.key_length ?? (nEmbd / nHead);
    const kvBytesPerToken = nLayers * nKv * headDim * 2 * 2; // K and V, f16
    emit({
        phase: "loadModel", s: r2((performance.now() - t) / 1000), size_gib: r2(model.size / 2 ** 30),
        layers: nLayers, gpuLayers: model.gpuLayers,
        trainContextSize: model.trainContextSize, kv_bytes_per_token: kvBytesPerToken, vram: await vram(llama),
    });

    // warm-up (first CUDA kernels, cuBLAS handles, module loads): one sequence with a full
    // ubatch of prompt, and one batched context with the largest B of the list
    if (warmupTokens > 0) {
        t = performance.now();
        const wp = Math.min(warmupTokens, batchSize);
        let ctx = await model.createContext({ contextSize: wp + 64, sequences: 1, batchSize, flashAttention: true });
        const seq = ctx.getSequence();
        const gen = seq.evaluate(randomTokens(wp, 7), evalOpts);
        for (let i = 0; i < 9; i++) await gen.next();
        await gen.return();
        await ctx.dispose();
        const wb = Math.max(1, ...batchedB);
        if (batchedP.length > 0 && wb > 1) {
            ctx = await model.createContext({ contextSize: 64, sequences: wb, batchSize: Math.max(batchSize, wb), flashAttention: true, ignoreMemorySafetyChecks: ignoreMemChecks });
            const gens = Array.from({ length: wb }, (_, i) => ctx.getSequence().evaluate(randomTokens(16, 70 + i), evalOpts));
            for (let k = 0; k < 5; k++) await Promise.all(gens.map((g) => g.next()));
            await Promise.all(gens.map((g) => g.return()));
            await ctx.dispose();
        }
        emit({ phase: "warmup", s: r2((performance.now() - t) / 1000), prompt: wp, batched_B: wb });
    }

    const prefillRate = {}; // P -> tok/s at batch 1, used to skip what would pass the deadline
    let lastDecodeTokS = null;
    const left = () => deadlineS - elapsed();

    for (const P of singleP) {
        // rough time estimate: prefill at the last measured rate, decode at the last rate
        const lastRate = Object.values(prefillRate).pop();
        const est = (lastRate ? P / lastRate * (1 + P / 65536) : 0) + (lastDecodeTokS ? N / lastDecodeTokS : 0) + 5;
        if (est > left()) { emit({ kind: "single", P, N, skipped: `estimated ${r2(est)} s > ${r2(left())} s left` }); continue; }
        let ctx;
        try {
            t = performance.now();
            ctx = await model.createContext({ contextSize: P + N + 16, sequences: 1, batchSize, flashAttention: true });
            const ctxS = (performance.now() - t) / 1000;
            const seq = ctx.getSequence();
            const tokens = randomTokens(P, 1000 + P);
            const gen = seq.evaluate(tokens, evalOpts);
            const t0 = performance.now();
            await gen.next();                       // prefill P tokens + sample the first new token
            const t1 = performance.now();
            await gen.next();                       // one untimed decode step
            const t1b = performance.now();
            for (let i = 0; i < N; i++) await gen.next(); // N timed decode steps of one token
            const t2 = performance.now();
            await gen.return();
            const prefillS = (t1 - t0) / 1000, decodeS = (t2 - t1b) / 1000;
            prefillRate[P] = P / prefillS; lastDecodeTokS = N / decodeS;
            emit({
                kind: "single", P, N, batchSize, contextSize: ctx.contextSize, ctx_create_s: r2(ctxS),
                prefill_s: +prefillS.toFixed(4), prefill_tok_s: r2(P / prefillS),
                decode_s: +decodeS.toFixed(4), decode_tok_s: r2(N / decodeS), ms_per_token: +(decodeS * 1000 / N).toFixed(3),
                flashAttention: ctx.flashAttention,
            });
        } catch (e) {
            emit({ kind: "single", P, N, error: String(e?.stack ?? e).slice(0, 600) });
        } finally {
            if (ctx) await ctx.dispose();
        }
    }

    const v0 = await vram(llama);
    for (const P of batchedP) {
        for (const B of batchedB) {
            const kvGiB = B * (P + batchedN + 272) * kvBytesPerToken / 2 ** 30;
            if (v0.free_gib != null && llama.gpu && kvGiB > v0.free_gib - 4) {
                emit({ kind: "batched", P, B, N: batchedN, skipped: `KV cache ~${r2(kvGiB)} GiB > free ${v0.free_gib} GiB - 4` });
                continue;
            }
            const rate = prefillRate[P] ?? Object.values(prefillRate).pop();
            const est = (rate ? B * P / rate * 1.3 : 0) + (lastDecodeTokS ? batchedN / lastDecodeTokS * (1 + B * P / 200000) : 0) + 5;
            if (est > left()) { emit({ kind: "batched", P, B, N: batchedN, skipped: `estimated ${r2(est)} s > ${r2(left())} s left` }); continue; }
            let ctx;
            try {
                t = performance.now();
                ctx = await model.createContext({
                    contextSize: P + batchedN + 16, sequences: B, batchSize: Math.max(batchSize, B), flashAttention: true,
                    ignoreMemorySafetyChecks: ignoreMemChecks, // our own KV-size check ran above
                });
                const ctxS = (performance.now() - t) / 1000;
                const seqs = Array.from({ length: B }, () => ctx.getSequence());
                const gens = seqs.map((s, i) => s.evaluate(randomTokens(P, 50000 + 1000 * i + P), evalOpts));
                const t0 = performance.now();
                await Promise.all(gens.map((g) => g.next()));   // B*P prompt tokens + first token of each
                const t1 = performance.now();
                await Promise.all(gens.map((g) => g.next()));   // one untimed decode step
                const t1b = performance.now();
                for (let i = 0; i < batchedN; i++) await Promise.all(gens.map((g) => g.next()));
                const t2 = performance.now();
                await Promise.all(gens.map((g) => g.return()));
                const prefillS = (t1 - t0) / 1000, decodeS = (t2 - t1b) / 1000;
                emit({
                    kind: "batched", P, B, N: batchedN, batchSize: ctx.batchSize, contextSize_per_seq: ctx.contextSize,
                    ctx_create_s: r2(ctxS), kv_gib: r2(kvGiB),
                    prefill_s: +prefillS.toFixed(4), prefill_tok_s: r2(B * P / prefillS),
                    decode_s: +decodeS.toFixed(4), decode_tok_s: r2(B * batchedN / decodeS),
                    ms_per_step: +(decodeS * 1000 / batchedN).toFixed(3), per_seq_tok_s: r2(batchedN / decodeS),
                });
            } catch (e) {
                emit({ kind: "batched", P, B, N: batchedN, error: String(e?.stack ?? e).slice(0, 600) });
            } finally {
                if (ctx) await ctx.dispose();
            }
        }
    }

    const summary = {
        summary: true, engine: "node-llama-cpp", version: nlcVersion, model: modelPath, ...env,
        total_s: r2(elapsed()),
        single: results.filter((r) => r.kind === "single"),
        batched: results.filter((r) => r.kind === "batched"),
        phases: results.filter((r) => r.phase),
    };
    const line = JSON.stringify(summary);
    console.log(line);
    if (summaryPath) fs.writeFileSync(summaryPath, JSON.stringify(summary, null, 1) + "\n");
    await model.dispose();
    await llama.dispose();
}

main().catch((e) => {
    console.log(JSON.stringify({ fatal: String(e?.stack ?? e).slice(0, 2000), t: r2(elapsed()) }));
    process.exit(1);
});
