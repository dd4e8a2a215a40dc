/**
 * The task handler of a {@link TokenizerPool} thread (a piscina worker): encodes texts and
 * renders chat templates with its own copy of the tokenizer, loaded once per thread from
 * `workerData.dir`. Results carry token ids as a Uint32Array; a prompt longer than
 * the task's limit comes back as its length only, so the caller never copies more ids than fit.
 * Expected failures (TokenizerError: a template that raises, a malformed message) come back as
 * values, since an error's class does not survive the thread boundary.
 */
import { workerData } from "piscina";
import type { ApplyChatTemplateOptions, ChatMessage } from "./chat_template.js";
import { TokenizerError } from "./errors.js";
import { Tokenizer } from "./tokenizer.js";

/** Encode a text. */
export interface EncodeTask {
  op: "encode";
  text: string;
  addSpecialTokens: boolean;
  /** Longest prompt (tokens) whose ids are returned; a longer one returns its length only. */
  maxTokens: number;
}

/** Render a conversation with the chat template, then encode the text. */
export interface ChatTask {
  op: "chat";
  messages: ChatMessage[];
  template: ApplyChatTemplateOptions;
  addSpecialTokens: boolean;
  maxTokens: number;
}

/** Load the tokenizer (the pool's warm-up: errors surface at start-up, not on a request). */
export interface PingTask {
  op: "ping";
}

export type TokenizerTask = EncodeTask | ChatTask | PingTask;

/** What a task answers. */
export type TokenizerTaskResult =
  /** The ids, and the rendered text for chat. */
  | { kind: "ids"; ids: Uint32Array; text?: string }
  /**
   * Longer than `maxTokens`: `numTokens` is exact when `exact`, else the length bound's minimum
   * (the text was not tokenized); `numBytes` is the UTF-8 length of the text.
   */
  | { kind: "tooLong"; numTokens: number; exact: boolean; numBytes: number }
  | { kind: "error"; message: string }
  | { kind: "pong" };

let tokenizer: Tokenizer | null = null;

function getTokenizer(): Tokenizer {
  tokenizer ??= Tokenizer.fromDir((workerData as { dir: string }).dir);
  return tokenizer;
}

/** Encodes `text` unless it is longer than `maxTokens` (checked by the bound first, then exactly). */
function encodeWithin(
  tok: Tokenizer,
  text: string,
  addSpecialTokens: boolean,
  maxTokens: number,
  chatText?: string,
): TokenizerTaskResult {
  const min = tok.minTokens(text);
  if (min > maxTokens) {
    return { kind: "tooLong", numTokens: min, exact: false, numBytes: Buffer.byteLength(text) } as const;
  }
  const ids = tok.encode(text, { addSpecialTokens });
  if (ids.length > maxTokens) {
    return {
      kind: "tooLong",
      numTokens: ids.length,
      exact: true,
      numBytes: Buffer.byteLength(text),
    } as const;
  }
  // Copied to the caller (structured clone: one memcpy of at most maxTokens ids).
  return {
    kind: "ids",
    ids: Uint32Array.from(ids),
    ...(chatText === undefined ? {} : { text: chatText }),
  } as const;
}

/** The piscina handler. */
export default function handle(task: TokenizerTask): TokenizerTaskResult {
  try {
    const tok = getTokenizer();
    switch (task.op) {
      case "ping":
        return { kind: "pong" };
      case "encode":
        return encodeWithin(tok, task.text, task.addSpecialTokens, task.maxTokens);
      case "chat": {
        const text = tok.applyChatTemplate(task.messages, task.template);
        return encodeWithin(tok, text, task.addSpecialTokens, task.maxTokens, text);
      }
    }
  } catch (e) {
    if (e instanceof TokenizerError) return { kind: "error", message: e.message };
    throw e;
  }
}
