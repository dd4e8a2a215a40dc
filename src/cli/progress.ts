import cliProgress from "cli-progress";

const GB = 1e9;

/**
 * "7.21/16.06 GB, 5.34 GB/s": bytes of weights placed / in all, and the rate of the
 * `rateBytes` placed in the last `seconds` (no rate before any time has passed).
 */
export function formatLoadProgress(
  doneBytes: number,
  totalBytes: number,
  rateBytes: number,
  seconds: number,
): string {
  const rate = seconds > 0 ? `, ${(rateBytes / GB / seconds).toFixed(2)} GB/s` : "";
  return `${(doneBytes / GB).toFixed(2)}/${(totalBytes / GB).toFixed(2)} GB${rate}`;
}

/**
 * A weight-loading progress bar on stderr (cli-progress): bytes placed / in all and GB/s
 * (models/weight_loader.ts reports bytes); silent when stderr is not a terminal.
 * @returns the progress callback (doneBytes, totalBytes) and a function that stops the bar.
 */
export function loadProgressBar(label = "Loading weights"): {
  onProgress: (doneBytes: number, totalBytes: number) => void;
  stop: () => void;
} {
  if (!process.stderr.isTTY) return { onProgress: () => {}, stop: () => {} };
  const bar = new cliProgress.SingleBar(
    {
      stream: process.stderr,
      format: `${label} [{bar}] {percentage}% | {bytes}`,
      hideCursor: true,
    },
    cliProgress.Presets.shades_classic,
  );
  // The rate counts from the first report (the bar exists before the backend does).
  let start = 0;
  let firstDone = 0;
  return {
    onProgress: (done, total) => {
      const now = performance.now();
      if (start === 0) {
        start = now;
        firstDone = done;
        bar.start(total, 0, { bytes: formatLoadProgress(done, total, 0, 0) });
      }
      bar.update(done, { bytes: formatLoadProgress(done, total, done - firstDone, (now - start) / 1000) });
    },
    stop: () => {
      if (start !== 0) bar.stop();
    },
  };
}

/** Seconds between progress lines when stderr is not a terminal. */
export const PROGRESS_LINE_INTERVAL_S = 10;

/** Where progress lines go and the clock they read (injectable for tests). */
export interface ProgressLineSink {
  write(line: string): void;
  /** Seconds. */
  now(): number;
  /** Starts a repeating timer; returns its stopper. */
  every(seconds: number, fn: () => void): () => void;
}

const stderrSink: ProgressLineSink = {
  write: (line) => process.stderr.write(`${line}\n`),
  now: () => performance.now() / 1000,
  every: (seconds, fn) => {
    const t = setInterval(fn, seconds * 1000);
    t.unref();
    return () => clearInterval(t);
  },
};

/**
 * Request progress as plain lines for logs (stderr is not a terminal, e.g. `bench serve > log
 * 2>&1`): one line at the start, one every `intervalS` seconds while requests are in flight,
 * one at the end, e.g. `[bench] 12/64 requests done (1 failed), 35.2 s`.
 */
export function progressLines(
  label: string,
  intervalS = PROGRESS_LINE_INTERVAL_S,
  sink: ProgressLineSink = stderrSink,
): { start(total: number): void; tick(success: boolean): void; stop(): void } {
  let total = 0;
  let done = 0;
  let failed = 0;
  let t0 = 0;
  let cancel: (() => void) | null = null;
  const line = () => {
    const f = failed > 0 ? ` (${failed} failed)` : "";
    sink.write(`[${label}] ${done}/${total} requests done${f}, ${(sink.now() - t0).toFixed(1)} s`);
  };
  return {
    start: (n) => {
      total = n;
      done = 0;
      failed = 0;
      t0 = sink.now();
      line();
      cancel?.();
      cancel = sink.every(intervalS, line);
    },
    tick: (success) => {
      done += 1;
      if (!success) failed += 1;
    },
    stop: () => {
      cancel?.();
      cancel = null;
      line();
    },
  };
}
