/** Result of feeding text to a {@link StopStringChecker}. */
export interface StopCheckResult {
  /** Text that may be streamed to the client now (never part of a possible stop string). */
  text: string;
  /** The stop string that matched, or null while generation continues. */
  stop: string | null;
}

/** Options of {@link StopStringChecker}. */
export interface StopStringCheckerOptions {
  /** Keep the matched stop string in the output (vLLM include_stop_str_in_output). Default false. */
  includeStopStrInOutput?: boolean;
}

/**
 * Finds stop strings in streamed text (vllm/v1/engine/detokenizer.py check_stop_strings, with
 * SGLang/TGI-style hold-back). Text arrives in pieces that need not align with stop strings, so
 * each push searches the new text plus the last `len(stop) - 1` characters before it. While
 * streaming, the longest tail that is a proper prefix of some stop string is held back: it is
 * released once it can no longer become a stop string, or dropped if it does. On a match the
 * output is cut at the start of the earliest match (or after it with includeStopStrInOutput);
 * among matches at the same position the stop string listed first wins.
 */
export class StopStringChecker {
  private readonly stops: readonly string[];
  private readonly includeStop: boolean;
  /** Every character received so far (cut at the match once stopped). */
  private text = "";
  /** Length of the prefix of `text` already released. */
  private released = 0;
  private matched: string | null = null;

  /** @throws Error when a stop string is empty (validated earlier for user input). */
  constructor(stops: readonly string[], opts: StopStringCheckerOptions = {}) {
    if (stops.some((s) => s.length === 0)) throw new Error("stop strings must be non-empty");
    this.stops = [...stops];
    this.includeStop = opts.includeStopStrInOutput ?? false;
  }

  /** The stop string that matched, or null. */
  get stop(): string | null {
    return this.matched;
  }

  /** All text released so far; after a match, the final output. */
  get output(): string {
    return this.text.slice(0, this.released);
  }

  /**
   * Feeds newly detokenized text.
   * @returns the text that can be released now and the stop string if one matched (after a
   *   match, later calls return no text and the same stop).
   */
  push(delta: string): StopCheckResult {
    if (this.matched !== null || delta.length === 0) return { text: "", stop: this.matched };
    const prevLen = this.text.length;
    this.text += delta;
    let best: { index: number; stop: string } | null = null;
    for (const s of this.stops) {
      const index = this.text.indexOf(s, Math.max(0, prevLen - s.length + 1));
      if (index !== -1 && (best === null || index < best.index)) best = { index, stop: s };
    }
    if (best !== null) {
      this.matched = best.stop;
      this.text = this.text.slice(0, best.index + (this.includeStop ? best.stop.length : 0));
      return { text: this.release(this.text.length), stop: best.stop };
    }
    return { text: this.release(this.text.length - this.heldBackLength()), stop: null };
  }

  /** Ends the stream without a match: releases the held-back tail. */
  flush(): string {
    return this.release(this.text.length);
  }

  /** Length of the longest tail of `text` that is a proper prefix of a stop string. */
  private heldBackLength(): number {
    let hold = 0;
    for (const s of this.stops) {
      for (let k = Math.min(s.length - 1, this.text.length); k > hold; k--) {
        if (this.text.endsWith(s.slice(0, k))) {
          hold = k;
          break;
        }
      }
    }
    return hold;
  }

  private release(end: number): string {
    if (end <= this.released) return "";
    const out = this.text.slice(this.released, end);
    this.released = end;
    return out;
  }
}
