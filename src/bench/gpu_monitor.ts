/**
 * GPU memory and energy during a benchmark, from `nvidia-smi` when it is installed: one sample
 * per GPU every ~100 ms (`--query-gpu=timestamp,index,memory.used,power.draw -lms 100`);
 * energy = ∫ total board power dt by the trapezoidal rule over nvidia-smi's own timestamps.
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process";

/** One GPU's reading at one time. */
export interface GpuSample {
  /** Milliseconds (from nvidia-smi's timestamp, local time). */
  timeMs: number;
  index: number;
  memoryUsedMiB: number;
  /** Board power in watts; NaN when the GPU does not report it. */
  powerW: number;
}

/** What a benchmark reports about the GPUs (result JSON field names in snake_case). */
export interface GpuStats {
  numGpus: number;
  numSamples: number;
  /** Largest memory in use summed over GPUs, MiB. */
  maxMemoryUsedMiB: number;
  /** ∫ power dt summed over GPUs, joules. */
  energyJ: number;
  /** energyJ / sampled duration, watts. */
  meanPowerW: number;
}

/** Query and period of the sampler (period 100 ms). */
export const NVIDIA_SMI_ARGS = [
  "--query-gpu=timestamp,index,memory.used,power.draw",
  "--format=csv,noheader,nounits",
  "-lms",
  "100",
];

/**
 * Parses one CSV line of {@link NVIDIA_SMI_ARGS} output, e.g.
 * "2025/01/31 12:00:00.250, 0, 81234, 612.45"; null for lines that are not samples.
 */
export function parseNvidiaSmiLine(line: string): GpuSample | null {
  const parts = line.split(",").map((s) => s.trim());
  if (parts.length !== 4) return null;
  const m = /^(\d{4})\/(\d{2})\/(\d{2}) (\d{2}):(\d{2}):(\d{2})\.(\d{3})$/.exec(parts[0]!);
  const index = Number(parts[1]);
  const mem = Number(parts[2]);
  if (m === null || !Number.isInteger(index) || !Number.isFinite(mem)) return null;
  const [y, mo, d, h, mi, s, ms] = m.slice(1).map(Number) as [
    number,
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  const timeMs = new Date(y, mo - 1, d, h, mi, s, ms).getTime();
  const power = Number(parts[3]);
  return { timeMs, index, memoryUsedMiB: mem, powerW: Number.isFinite(power) ? power : Number.NaN };
}

/**
 * Energy and memory from samples: per GPU, trapezoids between its consecutive samples
 * (those without power skipped); memory: the largest sum over GPUs of the latest readings.
 */
export function summarizeGpuSamples(samples: readonly GpuSample[]): GpuStats {
  const byGpu = new Map<number, GpuSample[]>();
  for (const s of samples) {
    const list = byGpu.get(s.index) ?? [];
    list.push(s);
    byGpu.set(s.index, list);
  }
  let energyJ = 0;
  let t0 = Number.POSITIVE_INFINITY;
  let t1 = Number.NEGATIVE_INFINITY;
  for (const list of byGpu.values()) {
    const withPower = list.filter((s) => !Number.isNaN(s.powerW)).sort((a, b) => a.timeMs - b.timeMs);
    for (let i = 1; i < withPower.length; i++) {
      const a = withPower[i - 1]!;
      const b = withPower[i]!;
      energyJ += ((a.powerW + b.powerW) / 2) * ((b.timeMs - a.timeMs) / 1000);
    }
    if (withPower.length > 0) {
      t0 = Math.min(t0, withPower[0]!.timeMs);
      t1 = Math.max(t1, withPower[withPower.length - 1]!.timeMs);
    }
  }
  const latest = new Map<number, number>();
  let maxMemoryUsedMiB = 0;
  for (const s of [...samples].sort((a, b) => a.timeMs - b.timeMs)) {
    latest.set(s.index, s.memoryUsedMiB);
    maxMemoryUsedMiB = Math.max(
      maxMemoryUsedMiB,
      [...latest.values()].reduce((x, y) => x + y, 0),
    );
  }
  const seconds = t1 > t0 ? (t1 - t0) / 1000 : 0;
  return {
    numGpus: byGpu.size,
    numSamples: samples.length,
    maxMemoryUsedMiB,
    energyJ,
    meanPowerW: seconds > 0 ? energyJ / seconds : 0,
  };
}

/** True when `command` runs (`nvidia-smi -L` exits 0). */
export function nvidiaSmiAvailable(command = "nvidia-smi"): boolean {
  try {
    return spawnSync(command, ["-L"], { stdio: "ignore", timeout: 5000 }).status === 0;
  } catch {
    return false;
  }
}

/** Samples GPUs in the background between `start()` and `stop()`. */
export class GpuMonitor {
  private child: ChildProcess | null = null;
  private closed: Promise<void> = Promise.resolve();
  private readonly samples: GpuSample[] = [];
  private partial = "";

  /** @param command the nvidia-smi executable (a path in tests). */
  constructor(private readonly command = "nvidia-smi") {}

  /** Samples read so far. */
  get numSamples(): number {
    return this.samples.length;
  }

  /** Starts nvidia-smi in loop mode. */
  start(): void {
    const child = spawn(this.command, NVIDIA_SMI_ARGS, { stdio: ["ignore", "pipe", "ignore"] });
    child.stdout.setEncoding("utf8");
    child.stdout.on("data", (text: string) => {
      const lines = (this.partial + text).split("\n");
      this.partial = lines.pop() ?? "";
      for (const l of lines) {
        const s = parseNvidiaSmiLine(l);
        if (s !== null) this.samples.push(s);
      }
    });
    // A failing nvidia-smi (e.g. removed mid-run) yields no samples rather than an error.
    this.closed = new Promise<void>((r) => {
      child.once("close", () => r());
      child.once("error", () => r());
    });
    this.child = child;
  }

  /** Stops sampling and summarizes what was read. */
  async stop(): Promise<GpuStats> {
    const child = this.child;
    this.child = null;
    if (child !== null && child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
    await this.closed;
    const last = parseNvidiaSmiLine(this.partial);
    if (last !== null) this.samples.push(last);
    this.partial = "";
    return summarizeGpuSamples(this.samples);
  }
}
