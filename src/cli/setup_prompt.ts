/**
 * The questions `setup` puts to a person at a terminal, one line per answer.
 *
 * @module
 */

/** Asks a question and returns the answer line. */
export type Ask = (question: string) => Promise<string>;

/**
 * Asks a yes/no question until the answer is one; Enter takes the default.
 *
 * @param ask Where the question goes.
 * @param question The question, without the `[Y/n]` hint.
 * @param fallback The answer Enter gives.
 * @returns The answer.
 */
export async function confirm(ask: Ask, question: string, fallback: boolean): Promise<boolean> {
  for (;;) {
    const answer = (await ask(`${question} [${fallback ? "Y/n" : "y/N"}] `)).trim().toLowerCase();
    if (answer === "") return fallback;
    if (answer === "y" || answer === "yes") return true;
    if (answer === "n" || answer === "no") return false;
  }
}

/** Reads answers from a terminal, one line per question. */
export class LinePrompter {
  #reader = Deno.stdin.readable.getReader();
  #decoder = new TextDecoder();
  #buffer = "";
  #encoder = new TextEncoder();

  /**
   * Prints the question and waits for a line.
   *
   * @param question The prompt, printed as is.
   * @returns The line, without its end.
   * @throws {Error} When stdin ends before a line arrives.
   */
  async ask(question: string): Promise<string> {
    Deno.stdout.writeSync(this.#encoder.encode(question));
    for (;;) {
      const newline = this.#buffer.indexOf("\n");
      if (newline >= 0) {
        const line = this.#buffer.slice(0, newline).replace(/\r$/, "");
        this.#buffer = this.#buffer.slice(newline + 1);
        return line;
      }
      const { value, done } = await this.#reader.read();
      if (done) throw new Error("Setup stopped: the terminal closed before the answer");
      this.#buffer += this.#decoder.decode(value, { stream: true });
    }
  }

  /** Releases stdin. */
  async close(): Promise<void> {
    await this.#reader.cancel().catch(() => {});
  }
}
