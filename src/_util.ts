/**
 * Small helpers that several parts of the server need, kept in one copy.
 *
 * @module
 */
import { createHash } from "node:crypto";

/**
 * Tells whether a value is a JSON object: not null, not an array.
 *
 * @param value Any value.
 * @returns Whether it is a plain object.
 */
export function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * Tells whether a value is an array of strings.
 *
 * @param value Any value.
 * @returns Whether every item is a string.
 */
export function isStringArray(value: unknown): value is string[] {
  return Array.isArray(value) && value.every((item) => typeof item === "string");
}

/**
 * Returns the SHA-256 of a text or bytes, in lower-case hex.
 *
 * @param data The text (hashed as UTF-8) or bytes.
 * @returns The 64-character digest.
 */
export function sha256Hex(data: string | Uint8Array): string {
  return createHash("sha256").update(data).digest("hex");
}

/**
 * Serialises JSON with object keys sorted and `undefined` members left out, so that equal values
 * give equal text.
 *
 * @param value A JSON-like value.
 * @returns The canonical JSON text.
 */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (isPlainObject(value)) {
    const keys = Object.keys(value).filter((k) => value[k] !== undefined).sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(value[k])}`).join(",")}}`;
  }
  return JSON.stringify(value) ?? "null";
}

/**
 * Reads an environment variable, treating a denied permission like an unset variable.
 *
 * @param name The variable.
 * @returns Its value, or undefined.
 */
export function envVar(name: string): string | undefined {
  try {
    return Deno.env.get(name);
  } catch {
    return undefined;
  }
}

/**
 * Formats a count with its noun: `1 server`, `2 servers`.
 *
 * @param count How many.
 * @param noun The singular noun.
 * @returns The phrase.
 */
export function plural(count: number, noun: string): string {
  return `${count} ${noun}${count === 1 ? "" : "s"}`;
}
