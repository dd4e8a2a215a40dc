import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { Tokenizer as HfTokenizer } from "@huggingface/tokenizers";
import {
  type ApplyChatTemplateOptions,
  type ChatMessage,
  ChatTemplate,
  type ChatTemplateTokens,
  findChatTemplate,
} from "./chat_template.js";
import { TokenizerError } from "./errors.js";
import { minTokensForBytes, type TokenByteBound, tokenByteBound } from "./length_bound.js";

/** File holding the tokenizer model (HF fast tokenizer format). */
export const TOKENIZER_FILE = "tokenizer.json";
/** File holding special-token names, the chat template and decode settings. */
export const TOKENIZER_CONFIG_FILE = "tokenizer_config.json";

/** Options of {@link Tokenizer.encode}. */
export interface EncodeOptions {
  /** Run the post-processor (e.g. add BOS) as HF does by default. Default true. */
  addSpecialTokens?: boolean;
}

/** Options of {@link Tokenizer.decode}. */
export interface DecodeOptions {
  /** Drop special tokens (added tokens marked `special`). Default false, as HF `decode`. */
  skipSpecialTokens?: boolean;
}

/** What the incremental detokenizer needs from a tokenizer. */
export interface TokenDecoder {
  decode(ids: readonly number[], opts?: DecodeOptions): string;
  isSpecialToken(id: number): boolean;
}

type Json = Record<string, unknown>;

/**
 * A Hugging Face tokenizer (`tokenizer.json` + `tokenizer_config.json`) over
 * @huggingface/tokenizers, with the model's chat template rendered by @huggingface/jinja.
 * Token ids are plain numbers; text is JS strings.
 */
export class Tokenizer implements TokenDecoder {
  /** Number of tokens including added tokens (HF `len(tokenizer)`); may be below the model's vocab_size. */
  readonly vocabSize: number;
  /** Ids of added tokens marked special, ascending. */
  readonly specialTokenIds: readonly number[];
  readonly bosTokenId: number | null;
  readonly eosTokenId: number | null;
  readonly padTokenId: number | null;
  private readonly specialSet: ReadonlySet<number>;
  private readonly chatTemplate: ChatTemplate | null;

  private constructor(
    private readonly hf: HfTokenizer,
    config: Json,
    chatTemplateSource: string | null,
    /** Directory the tokenizer was read from (for messages). */
    readonly dir: string,
    /** The most input bytes one token stands for (length_bound.ts), computed once at load. */
    readonly lengthBound: TokenByteBound,
  ) {
    this.vocabSize = hf.get_vocab(true).size;
    const specials = [...hf.get_added_tokens_decoder().values()].filter((t) => t.special).map((t) => t.id);
    this.specialTokenIds = specials.sort((a, b) => a - b);
    this.specialSet = new Set(specials);
    const tokens: ChatTemplateTokens = {
      bos_token: tokenString(config.bos_token),
      eos_token: tokenString(config.eos_token),
      pad_token: tokenString(config.pad_token),
      unk_token: tokenString(config.unk_token),
    };
    const idOf = (s: string | null) => (s === null ? null : (hf.token_to_id(s) ?? null));
    this.bosTokenId = idOf(tokens.bos_token);
    this.eosTokenId = idOf(tokens.eos_token);
    this.padTokenId = idOf(tokens.pad_token);
    this.chatTemplate = chatTemplateSource === null ? null : new ChatTemplate(chatTemplateSource, tokens);
  }

  /**
   * Loads `<dir>/tokenizer.json` and `<dir>/tokenizer_config.json` (optional) and the chat
   * template (see findChatTemplate).
   * @throws TokenizerError when tokenizer.json is missing or either file is not valid JSON.
   */
  static fromDir(dir: string): Tokenizer {
    const tokPath = join(dir, TOKENIZER_FILE);
    if (!existsSync(tokPath)) {
      throw new TokenizerError(
        `no ${TOKENIZER_FILE} in ${dir} (text prompts need a tokenizer; pass --tokenizer DIR)`,
      );
    }
    const tokenizerJson = readJson(tokPath);
    const cfgPath = join(dir, TOKENIZER_CONFIG_FILE);
    const config = existsSync(cfgPath) ? readJson(cfgPath) : {};
    let hf: HfTokenizer;
    try {
      hf = new HfTokenizer(tokenizerJson, config);
    } catch (e) {
      throw new TokenizerError(`${tokPath} could not be loaded (${(e as Error).message})`);
    }
    return new Tokenizer(hf, config, findChatTemplate(dir, config), dir, tokenByteBound(tokenizerJson));
  }

  /** True when `dir` holds a tokenizer.json (config-only model folders have none). */
  static existsIn(dir: string): boolean {
    return existsSync(join(dir, TOKENIZER_FILE));
  }

  /**
   * Fewest tokens `text` can encode to, from its byte length alone (0 when this tokenizer has no
   * such bound): a text whose bound exceeds the context is refused without being tokenized.
   * O(1) in the text's encoding work (one UTF-8 length count).
   */
  minTokens(text: string): number {
    return minTokensForBytes(Buffer.byteLength(text, "utf8"), this.lengthBound.maxBytesPerToken);
  }

  /** Token ids of `text`. */
  encode(text: string, opts: EncodeOptions = {}): number[] {
    return this.hf.encode(text, { add_special_tokens: opts.addSpecialTokens ?? true }).ids;
  }

  /** Text of `ids` (ids outside the vocabulary are dropped, as HF does); "" for no ids. */
  decode(ids: readonly number[], opts: DecodeOptions = {}): string {
    if (ids.length === 0) return "";
    return this.hf.decode([...ids], { skip_special_tokens: opts.skipSpecialTokens ?? false });
  }

  isSpecialToken(id: number): boolean {
    return this.specialSet.has(id);
  }

  /** Token string of an id (e.g. "Ġthe"), undefined when out of range. */
  idToToken(id: number): string | undefined {
    return this.hf.id_to_token(id);
  }

  /** Id of a token string, undefined when unknown. */
  tokenToId(token: string): number | undefined {
    return this.hf.token_to_id(token);
  }

  get hasChatTemplate(): boolean {
    return this.chatTemplate !== null;
  }

  /**
   * Renders a conversation with the model's chat template. Encode the result with
   * `addSpecialTokens: false` (the template already holds any BOS), as HF and vLLM do.
   * @throws TokenizerError when the model has no chat template, a message is malformed, or the
   *   template raises.
   */
  applyChatTemplate(messages: readonly ChatMessage[], opts: ApplyChatTemplateOptions = {}): string {
    if (this.chatTemplate === null) {
      throw new TokenizerError(
        `the tokenizer in ${this.dir} has no chat template, so chat messages cannot be formatted`,
      );
    }
    return this.chatTemplate.render(messages, opts);
  }
}

/** A special token given as a string or an AddedToken object ({content}). */
function tokenString(v: unknown): string | null {
  if (typeof v === "string") return v;
  if (v !== null && typeof v === "object" && typeof (v as { content?: unknown }).content === "string") {
    return (v as { content: string }).content;
  }
  return null;
}

function readJson(path: string): Json {
  let v: unknown;
  try {
    v = JSON.parse(readFileSync(path, "utf8"));
  } catch (e) {
    throw new TokenizerError(`${path} is not valid JSON (${(e as Error).message})`);
  }
  if (v === null || typeof v !== "object" || Array.isArray(v))
    throw new TokenizerError(`${path} must hold a JSON object`);
  return v as Json;
}
