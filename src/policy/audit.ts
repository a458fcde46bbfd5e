/**
 * The audit log: one JSON line per execution and one per tool call, with secrets redacted, in a
 * file only its owner can read, rotated by size. Writing it never fails an execution.
 *
 * @module
 */
import { dirname } from "node:path";
import type { Logger } from "../log.ts";
import { redact } from "../redact.ts";

/** Where and how the audit log is written. */
export interface AuditLogOptions {
  /** The JSONL file. */
  path: string;
  /** Size at which the file is rotated. */
  maxBytes: number;
  /** Files kept: the current one plus `maxFiles - 1` rotated ones (`.1` is the newest). */
  maxFiles: number;
  /** Where a write failure is reported (once). */
  log: Logger;
}

/** How long a record waits before it is written, with those made meanwhile. */
const WRITE_DELAY_MS = 10;

/** An append-only JSONL audit log. */
export class AuditLog {
  #options: AuditLogOptions;
  #queue: Promise<void> = Promise.resolve();
  /** Records not yet written; the first is being written when a write is under way. */
  #lines: string[] = [];
  #failed = false;
  #madePrivate = false;
  #encoder = new TextEncoder();

  /**
   * Creates the log; the file (and its directory) is created on the first record, not here.
   *
   * @param options File, rotation and the logger for failures.
   */
  constructor(options: AuditLogOptions) {
    this.#options = options;
  }

  /** The file written to. */
  get path(): string {
    return this.#options.path;
  }

  /**
   * Appends one record (redacted, with a timestamp). Never throws: a failure is logged once.
   *
   * @param record The fields to record.
   */
  record(record: Record<string, unknown>): void {
    this.#lines.push(JSON.stringify(redact({ ts: new Date().toISOString(), ...record })) + "\n");
    // Written a moment later, in order: a run's records are made just before its response, and
    // the file operations would otherwise compete with it.
    if (this.#lines.length > 1) return;
    this.#queue = this.#queue
      .then(() => new Promise((resolve) => setTimeout(resolve, WRITE_DELAY_MS)))
      .then(async () => {
        for (let line; (line = this.#lines[0]) !== undefined; this.#lines.shift()) {
          await this.#append(line).catch((error) => this.#failedOnce(error));
        }
      });
  }

  #failedOnce(error: Error): void {
    if (this.#failed) return;
    this.#failed = true;
    this.#options.log.warn(
      `Cannot write the audit log ${this.#options.path} (executions continue unrecorded): ${error.message}`,
    );
  }

  /** Waits until every record so far is written. */
  flush(): Promise<void> {
    return this.#queue;
  }

  async #append(line: string): Promise<void> {
    const { path, maxBytes } = this.#options;
    const bytes = this.#encoder.encode(line);
    const size = await Deno.stat(path).then((s) => s.size, () => undefined);
    if (size === undefined) await Deno.mkdir(dirname(path), { recursive: true, mode: 0o700 });
    else if (size > 0 && size + bytes.length > maxBytes) {
      await this.#rotate();
      this.#madePrivate = false;
    }
    const file = await Deno.open(path, { append: true, create: true, mode: 0o600 });
    try {
      // The mode applies only when the file is created; make an existing one private too.
      if (!this.#madePrivate && Deno.build.os !== "windows") await Deno.chmod(path, 0o600);
      this.#madePrivate = true;
      let offset = 0;
      while (offset < bytes.length) offset += await file.write(bytes.subarray(offset));
    } finally {
      file.close();
    }
  }

  async #rotate(): Promise<void> {
    const { path, maxFiles } = this.#options;
    const keep = Math.max(1, maxFiles) - 1;
    await Deno.remove(`${path}.${keep}`).catch(() => {});
    for (let n = keep - 1; n >= 1; n--) {
      await Deno.rename(`${path}.${n}`, `${path}.${n + 1}`).catch(() => {});
    }
    if (keep >= 1) await Deno.rename(path, `${path}.1`);
    else await Deno.remove(path);
  }
}
