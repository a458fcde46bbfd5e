/**
 * The audit log: one JSON line per execution and one per tool call, with secrets redacted, in a
 * file only its owner can read, rotated by size. Writing it never fails an execution.
 *
 * @module
 */
import { dirname } from "node:path";
import type { Logger } from "../log.ts";
import { isPlainObject } from "../_util.ts";

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

const REDACTED = "[REDACTED]";

/** Secret-looking text and what replaces it; order matters (whole blocks before fragments). */
const SECRET_PATTERNS: Array<[RegExp, string]> = [
  [
    /-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)/g,
    `-----BEGIN PRIVATE KEY-----${REDACTED}-----END PRIVATE KEY-----`,
  ],
  [/\b(Bearer|Basic|Token)\s+[A-Za-z0-9._~+/=-]{8,}/gi, `$1 ${REDACTED}`],
  // user:password@ in URLs of any scheme.
  [/\b([a-z][a-z0-9+.-]*:\/\/[^\s/:@]+):[^\s/@]+@/gi, `$1:${REDACTED}@`],
  [/\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}/g, REDACTED],
  [/\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}/g, REDACTED],
  [/\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}/g, REDACTED],
  [/\bgithub_pat_[A-Za-z0-9_]{20,}/g, REDACTED],
  [/\bxox[abprs]-[A-Za-z0-9-]{10,}/g, REDACTED],
  [/\bAKIA[0-9A-Z]{16}\b/g, REDACTED],
  [/\bAIza[0-9A-Za-z_-]{35}\b/g, REDACTED],
  [/\bglpat-[A-Za-z0-9_-]{20,}/g, REDACTED],
  // key = value / "key": "value" for names that say they hold a secret.
  [
    /((?:api[_-]?key|access[_-]?token|auth[_-]?token|secret|password|passwd|pwd|token)["']?\s*[:=]\s*["']?)[^\s"',;&]{4,}/gi,
    `$1${REDACTED}`,
  ],
];

/**
 * Replaces secret-looking substrings: API keys, bearer tokens, passwords in URLs, private keys,
 * JWTs and `password=…`-style assignments.
 *
 * @param text Any text.
 * @returns The text with secrets replaced by `[REDACTED]`.
 */
export function redactText(text: string): string {
  let out = text;
  for (const [pattern, replacement] of SECRET_PATTERNS) out = out.replace(pattern, replacement);
  return out;
}

/**
 * Redacts every string inside a JSON-like value (keys included).
 *
 * @param value Any JSON-like value.
 * @returns A copy with secrets redacted.
 */
export function redact<T>(value: T): T {
  if (typeof value === "string") return redactText(value) as T;
  if (Array.isArray(value)) return value.map((v) => redact(v)) as T;
  if (isPlainObject(value)) {
    return Object.fromEntries(
      Object.entries(value).map(([k, v]) => [redactText(k), redact(v)]),
    ) as T;
  }
  return value;
}

/** An append-only JSONL audit log. */
export class AuditLog {
  #options: AuditLogOptions;
  #queue: Promise<void> = Promise.resolve();
  #failed = false;
  #madePrivate = false;
  #encoder = new TextEncoder();

  /**
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
    const line = JSON.stringify(redact({ ts: new Date().toISOString(), ...record })) + "\n";
    this.#queue = this.#queue.then(() => this.#append(line)).catch((error) => {
      if (this.#failed) return;
      this.#failed = true;
      this.#options.log.warn(
        `Cannot write the audit log ${this.#options.path} (executions continue unrecorded): ${
          (error as Error).message
        }`,
      );
    });
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
