import type { SamplingParams } from "../core/sampling_params.js";
import type { AsyncLLM } from "../engine/async_llm.js";
import type { RequestOutput } from "../engine/outputs.js";
import type { MetricsRegistry, RequestTracker } from "../metrics/metrics_registry.js";

/** A tokenized prompt as the engine takes it. */
export interface TokenizedPrompt {
  prompt?: string;
  promptTokenIds: number[];
}

/** One engine request of an HTTP request: one choice of one prompt. */
export interface ChildRequest {
  /** OpenAI choice index (promptIndex × n + i). */
  index: number;
  /** Engine request id: `<response id>-<index>`. */
  requestId: string;
  prompt: TokenizedPrompt;
  params: SamplingParams;
}

/** One output of one child. */
export interface GroupOutput {
  index: number;
  output: RequestOutput;
}

interface Child {
  spec: ChildRequest;
  iterator: AsyncIterableIterator<RequestOutput>;
  tracker: RequestTracker | null;
  finished: boolean;
}

/**
 * The engine requests behind one HTTP request (vLLM's ParentRequest fan-out for `n > 1` and
 * batched prompts): submitted all or none, iterated as one merged stream of outputs in arrival
 * order, aborted together when the client leaves.
 */
export class RequestGroup {
  private aborted = false;

  private constructor(
    private readonly llm: AsyncLLM,
    private readonly children: Child[],
  ) {}

  /**
   * Adds every child to the engine (outputs in "delta" mode). If one is refused, those already
   * added are aborted and the error is rethrown, so no partial group stays in the engine.
   * @throws EngineInputError (or any error of AsyncLLM.generate) of the first refused child.
   */
  static submit(
    llm: AsyncLLM,
    specs: readonly ChildRequest[],
    metrics: MetricsRegistry | null,
  ): RequestGroup {
    const children: Child[] = [];
    try {
      for (const spec of specs) {
        const iterator = llm.generate(spec.prompt, spec.params, {
          requestId: spec.requestId,
          outputKind: "delta",
        });
        children.push({ spec, iterator, tracker: metrics?.trackRequest() ?? null, finished: false });
      }
    } catch (e) {
      for (const c of children) llm.abort(c.spec.requestId);
      throw e;
    }
    return new RequestGroup(llm, children);
  }

  /** Number of engine requests. */
  get size(): number {
    return this.children.length;
  }

  /** True once every child produced its final output. */
  get finished(): boolean {
    return this.children.every((c) => c.finished);
  }

  /** True after {@link abort}. */
  get wasAborted(): boolean {
    return this.aborted;
  }

  /**
   * Aborts every unfinished child (idempotent). The engine frees their blocks in its next step;
   * {@link outputs} then ends without their final outputs.
   */
  abort(): void {
    if (this.aborted) return;
    this.aborted = true;
    for (const c of this.children) {
      if (c.finished) continue;
      c.tracker?.abort();
      this.llm.abort(c.spec.requestId);
    }
  }

  /**
   * The children's outputs merged in the order the engine produced them. Ends when every
   * child finished or the group was aborted. Leaving the iteration early aborts the group.
   * @throws the engine's error if a step failed (the group is aborted first).
   */
  async *outputs(): AsyncGenerator<GroupOutput> {
    // Rejections are caught into values: an engine failure rejects every child's next(), and
    // only the first one is awaited.
    type Next = { child: Child; r: IteratorResult<RequestOutput> | null; error?: unknown };
    const pending = new Map<Child, Promise<Next>>();
    const arm = (child: Child) =>
      pending.set(
        child,
        child.iterator.next().then(
          (r) => ({ child, r }),
          (error: unknown) => ({ child, r: null, error }),
        ),
      );
    for (const c of this.children) arm(c);
    try {
      while (pending.size > 0) {
        const { child, r, error } = await Promise.race(pending.values());
        if (r === null) throw error;
        if (r.done === true) {
          pending.delete(child);
          continue;
        }
        const out = r.value;
        child.tracker?.observe(out);
        if (out.finished) child.finished = true;
        arm(child);
        yield { index: child.spec.index, output: out };
      }
    } finally {
      if (!this.finished) this.abort();
    }
  }
}
