import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { Template } from "@huggingface/jinja";
import { TokenizerError } from "./errors.js";

/** One text part of an OpenAI-style content array. */
export interface ChatTextPart {
  type: "text";
  text: string;
}

/**
 * One chat message (OpenAI / HF shape). `content` is a string or an array of text parts; other
 * fields (name, tool_calls, ...) are passed to the template unchanged.
 */
export interface ChatMessage {
  role: string;
  content: string | ChatTextPart[] | null;
  [key: string]: unknown;
}

/** Options of {@link ChatTemplate.render}. */
export interface ApplyChatTemplateOptions {
  /** Append the assistant turn opener (HF `add_generation_prompt`). Default false. */
  addGenerationPrompt?: boolean;
  /** Extra template variables (vLLM `chat_template_kwargs`, e.g. `enable_thinking`). */
  chatTemplateKwargs?: Record<string, unknown>;
}

/** Special-token strings a template may reference (HF passes the special tokens map). */
export interface ChatTemplateTokens {
  bos_token: string | null;
  eos_token: string | null;
  pad_token: string | null;
  unk_token: string | null;
}

/**
 * A parsed Jinja chat template (transformers `apply_chat_template` semantics): renders
 * `messages`, `add_generation_prompt` and the special-token strings; `raise_exception` and
 * `strftime_now` come with @huggingface/jinja.
 */
export class ChatTemplate {
  private readonly template: Template;

  /** @throws TokenizerError when the template does not parse. */
  constructor(
    readonly source: string,
    private readonly tokens: ChatTemplateTokens,
  ) {
    try {
      this.template = new Template(source);
    } catch (e) {
      throw new TokenizerError(`the chat template does not parse (${(e as Error).message})`);
    }
  }

  /**
   * Renders the prompt text. Content arrays are flattened to their text parts joined by "\n"
   * (vLLM's "string" content format); null content renders as "".
   * @throws TokenizerError when a message is malformed or the template raises.
   */
  render(messages: readonly ChatMessage[], opts: ApplyChatTemplateOptions = {}): string {
    const flat = messages.map(flattenMessage);
    try {
      return this.template.render({
        ...this.tokens,
        ...opts.chatTemplateKwargs,
        messages: flat,
        add_generation_prompt: opts.addGenerationPrompt ?? false,
      });
    } catch (e) {
      throw new TokenizerError(`the chat template failed to render (${(e as Error).message})`);
    }
  }
}

/**
 * Returns the message with string content.
 * @throws TokenizerError when the role is not a string or a content part is not text.
 */
export function flattenMessage(m: ChatMessage, index: number): ChatMessage {
  if (m === null || typeof m !== "object" || typeof m.role !== "string") {
    throw new TokenizerError(`chat message ${index} needs a string "role"`);
  }
  const c = m.content;
  if (c === null || c === undefined) return { ...m, content: "" };
  if (typeof c === "string") return m;
  if (!Array.isArray(c))
    throw new TokenizerError(`chat message ${index} has content that is neither a string nor an array`);
  const texts = c.map((part, j) => {
    if (part?.type !== "text" || typeof part.text !== "string") {
      throw new TokenizerError(
        `chat message ${index} content part ${j} is not a text part (only text is supported)`,
      );
    }
    return part.text;
  });
  return { ...m, content: texts.join("\n") };
}

/**
 * Finds a model's chat template, in transformers' order: `chat_template.jinja`, then
 * `chat_template.json` ({"chat_template": ...}), then `tokenizer_config.json` "chat_template"
 * (a string, or a list of {name, template} from which "default" is taken).
 * @returns the template source, or null when the model has none.
 */
export function findChatTemplate(dir: string, tokenizerConfig: Record<string, unknown>): string | null {
  const jinjaPath = join(dir, "chat_template.jinja");
  if (existsSync(jinjaPath)) return readFileSync(jinjaPath, "utf8");
  const jsonPath = join(dir, "chat_template.json");
  if (existsSync(jsonPath)) {
    try {
      const t = (JSON.parse(readFileSync(jsonPath, "utf8")) as { chat_template?: unknown }).chat_template;
      if (typeof t === "string") return t;
    } catch {
      throw new TokenizerError(`${jsonPath} is not valid JSON`);
    }
  }
  return pickTemplate(tokenizerConfig.chat_template);
}

function pickTemplate(t: unknown): string | null {
  if (typeof t === "string") return t;
  if (Array.isArray(t)) {
    const named = t as { name?: unknown; template?: unknown }[];
    const def = named.find((x) => x?.name === "default") ?? named[0];
    return typeof def?.template === "string" ? def.template : null;
  }
  return null;
}
