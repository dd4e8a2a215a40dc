/**
 * Incremental parser of a Server-Sent Events stream (the WHATWG "event stream" format OpenAI
 * servers use): feed it text as it arrives, get back the `data` payload of every complete event.
 * Comment lines (starting with ":", used as keep-alive pings) and other fields are skipped.
 */
export class SseParser {
  private buffer = "";

  /**
   * Adds received text.
   * @returns the data of each event completed by this text (multi-line data joined with "\n")
   */
  push(text: string): string[] {
    this.buffer += text.replace(/\r\n?/g, "\n");
    const events: string[] = [];
    let end = this.buffer.indexOf("\n\n");
    while (end >= 0) {
      const block = this.buffer.slice(0, end);
      this.buffer = this.buffer.slice(end + 2);
      const data = dataOf(block);
      if (data !== null) events.push(data);
      end = this.buffer.indexOf("\n\n");
    }
    return events;
  }

  /** Data of a last event not followed by a blank line (when the stream ends), or null. */
  flush(): string | null {
    const data = dataOf(this.buffer);
    this.buffer = "";
    return data;
  }
}

/** The joined `data:` lines of one event block, or null when it has none. */
function dataOf(block: string): string | null {
  const lines: string[] = [];
  for (const line of block.split("\n")) {
    if (line.startsWith("data:")) lines.push(line.slice(line.startsWith("data: ") ? 6 : 5));
  }
  return lines.length === 0 ? null : lines.join("\n");
}
