/**
 * Filler text of passkey documents: real prose the reference models never saw verbatim. The
 * default is the licence texts Debian installs in /usr/share/common-licenses (base-files
 * package): GPL-3, GPL-2, LGPL-2.1, MPL-2.0, Apache-2.0, GFDL-1.3, about 130 KB, ~35K ref-small
 * tokens. `--filler-file` replaces them with any text files.
 */
import { existsSync, readFileSync } from "node:fs";

/** The default filler files, in the order they are concatenated. */
export const DEFAULT_FILLER_FILES = [
  "/usr/share/common-licenses/GPL-3",
  "/usr/share/common-licenses/GPL-2",
  "/usr/share/common-licenses/LGPL-2.1",
  "/usr/share/common-licenses/MPL-2.0",
  "/usr/share/common-licenses/Apache-2.0",
  "/usr/share/common-licenses/GFDL-1.3",
];

/** Error for missing filler text; the message is one sentence for the user. */
export class FillerError extends Error {
  override name = "FillerError";
}

/**
 * Reads and joins the filler files (blank line between files). With no paths given, the
 * default files that exist are used.
 * @returns the text and the files it came from
 * @throws FillerError when a given file cannot be read, or no default file exists.
 */
export function loadFiller(paths?: readonly string[]): { text: string; files: string[] } {
  const files = paths && paths.length > 0 ? [...paths] : DEFAULT_FILLER_FILES.filter((f) => existsSync(f));
  if (files.length === 0)
    throw new FillerError("no filler text found in /usr/share/common-licenses; pass --filler-file FILE");
  const parts = files.map((f) => {
    try {
      return readFileSync(f, "utf8").trim();
    } catch (e) {
      throw new FillerError(`cannot read filler file ${f} (${(e as NodeJS.ErrnoException).code ?? "error"})`);
    }
  });
  return { text: parts.join("\n\n"), files };
}
