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
