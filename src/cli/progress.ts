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
