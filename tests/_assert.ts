/**
 * Minimal assertions (the standard library is on JSR, which this project cannot reach).
 *
 * @module
 */
import { deepStrictEqual, match, ok, rejects } from "node:assert/strict";

/** Asserts that a value is truthy. */
export function assert(value: unknown, message?: string): asserts value {
  ok(value, message);
}

/** Asserts deep equality. */
export function assertEquals<T>(actual: T, expected: T, message?: string): void {
  deepStrictEqual(actual, expected, message);
}

/** Asserts that a string matches a pattern. */
export function assertMatch(actual: string, pattern: RegExp, message?: string): void {
  match(actual, pattern, message);
}

/** Asserts that a promise rejects. */
export async function assertRejects(fn: () => Promise<unknown>, message?: string): Promise<void> {
  await rejects(fn, message);
}
