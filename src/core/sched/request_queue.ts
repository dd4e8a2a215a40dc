import type { Request } from "../request.js";

/**
 * First-come-first-served waiting queue (vllm/v1/core/sched/request_queue.py FCFSRequestQueue):
 * new requests join the back; preempted requests go back to the front, so they resume before
 * anything that arrived after them.
 *
 * Array-backed with a head index: `add`, `peek` and `popFront` are O(1) amortized; `prepend`
 * is O(1) while the head has room (after pops) and O(n) otherwise; `remove` (aborts) is O(n).
 */
export class RequestQueue {
  /** Slots before `head` are popped and hold undefined, so they keep no request alive. */
  private items: (Request | undefined)[] = [];
  private head = 0;

  get length(): number {
    return this.items.length - this.head;
  }

  /** Appends at the back. */
  add(request: Request): void {
    this.items.push(request);
  }

  /** Inserts at the front (a preempted request). */
  prepend(request: Request): void {
    if (this.head > 0) {
      this.head--;
      this.items[this.head] = request;
    } else {
      this.items.unshift(request);
    }
  }

  /** The front request, or undefined when empty. */
  peek(): Request | undefined {
    return this.items[this.head];
  }

  /**
   * Removes and returns the front request.
   * @throws Error when the queue is empty.
   */
  popFront(): Request {
    const r = this.items[this.head];
    if (r === undefined) throw new Error("the waiting queue is empty");
    this.items[this.head] = undefined;
    this.head++;
    if (this.head > 64 && this.head * 2 > this.items.length) this.compact();
    return r;
  }

  /** Removes `request` wherever it is; returns false when it is not queued. */
  remove(request: Request): boolean {
    const i = this.items.indexOf(request, this.head);
    if (i < 0) return false;
    this.items.splice(i, 1);
    return true;
  }

  /** Requests from front to back. */
  toArray(): Request[] {
    return this.items.slice(this.head) as Request[];
  }

  private compact(): void {
    this.items = this.items.slice(this.head);
    this.head = 0;
  }
}
