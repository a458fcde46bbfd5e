/**
 * Redaction of secret-looking text (API keys, bearer tokens, passwords in URLs, private keys,
 * JWTs, `password=…` assignments), for everything the server writes down or passes on: the audit
 * log, LLM prompts and answers, and the secrets check of `setup`.
 *
 * @module
 */

import { isPlainObject } from "./_util.ts";

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
