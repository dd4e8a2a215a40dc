import cliProgress from "cli-progress";

/**
 * A weight-loading progress bar on stderr (cli-progress); silent when stderr is not a terminal.
 * @returns the progress callback and a function that stops the bar.
 */
export function loadProgressBar(label = "Loading weights"): {
  onProgress: (d: number, t: number) => void;
  stop: () => void;
} {
  if (!process.stderr.isTTY) return { onProgress: () => {}, stop: () => {} };
  const bar = new cliProgress.SingleBar(
    {
      stream: process.stderr,
      format: `${label} [{bar}] {percentage}% | {value}/{total} tensors`,
      hideCursor: true,
    },
    cliProgress.Presets.shades_classic,
  );
  let started = false;
  return {
    onProgress: (done, total) => {
      if (!started) {
        bar.start(total, 0);
        started = true;
      }
      bar.update(done);
    },
    stop: () => {
      if (started) bar.stop();
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
