/**
 * Minimal assertions (the standard library is on JSR, which this project cannot reach), and the
 * assertions on execution results that the end-to-end tests share.
 *
 * @module
 */
import { deepStrictEqual, match, ok, rejects } from "node:assert/strict";
import type { ExecutionResult } from "../src/exec/result.ts";

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

/** A class of errors, for {@linkcode assertThrows} and {@linkcode assertRejects}. */
export type ErrorClass<E extends Error> = new (...args: never[]) => E;

/**
 * Asserts that a promise rejects.
 *
 * @param fn Starts the work that must fail.
 * @param message Said when it does not.
 */
export async function assertRejects(fn: () => Promise<unknown>, message?: string): Promise<void>;
/**
 * Asserts that `fn` throws or rejects with an error of `type`, and returns that error so that
 * the test can check its message.
 *
 * @param fn Starts the work that must fail.
 * @param type The class the error must be an instance of.
 * @returns The error.
 */
export async function assertRejects<E extends Error>(
  fn: () => unknown,
  type: ErrorClass<E>,
): Promise<E>;
export async function assertRejects<E extends Error>(
  fn: () => unknown,
  typeOrMessage?: ErrorClass<E> | string,
): Promise<E | void> {
  if (typeof typeOrMessage !== "function") {
    return await rejects(async () => await fn(), typeOrMessage);
  }
  try {
    await fn();
  } catch (error) {
    assert(error instanceof typeOrMessage, `expected a ${typeOrMessage.name}, got ${error}`);
    return error;
  }
  throw new Error(`Expected a ${typeOrMessage.name}: the call succeeded`);
}

/**
 * Asserts that `fn` throws an error of `type` synchronously, and returns that error.
 *
 * @param fn The call that must fail.
 * @param type The class the error must be an instance of.
 * @returns The error.
 */
export function assertThrows<E extends Error>(fn: () => unknown, type: ErrorClass<E>): E {
  try {
    fn();
  } catch (error) {
    assert(error instanceof type, `expected a ${type.name}, got ${error}`);
    return error;
  }
  throw new Error(`Expected a ${type.name}: the call succeeded`);
}

/** A `run_typescript` or `run_python` result as the client sees it. */
export type RunResult = ExecutionResult & { isError: boolean };

/**
 * Renders a result for assertion messages: everything a failing test needs, with the output and
 * the return value cut to `maxChars` (a test may return megabytes on purpose).
 *
 * @param result The result, from the client or from the executor directly.
 * @param maxChars How much of stdout, stderr and the JSON of the return value to keep.
 * @returns One line of JSON.
 */
export function describeResult(result: RunResult | ExecutionResult, maxChars = 500): string {
  return JSON.stringify({
    ok: result.ok,
    isError: "isError" in result ? result.isError : undefined,
    error: result.error,
    returnValue: JSON.stringify(result.returnValue)?.slice(0, maxChars),
    toolCalls: result.toolCalls,
    stdout: result.stdout?.slice(0, maxChars),
    stderr: result.stderr?.slice(0, maxChars),
    durationMs: result.durationMs,
  });
}

/**
 * Asserts that a run succeeded with this return value (and, when given, printed exactly this).
 *
 * @param result The run's result.
 * @param expected The return value.
 * @param options `stdout`: the whole output the run must have printed.
 */
export function assertReturns(
  result: RunResult,
  expected: unknown,
  options: { stdout?: string } = {},
): void {
  assertEquals(result.isError, false, describeResult(result));
  assertEquals(result.ok, true, describeResult(result));
  assertEquals(result.returnValue, expected, describeResult(result));
  if (options.stdout !== undefined) {
    assertEquals(result.stdout, options.stdout, describeResult(result));
  }
}

/**
 * Asserts that a run did not end in an error and returns its return value, for a test that
 * checks the value's parts one by one.
 *
 * @param result The run's result.
 * @returns The return value, typed as what the code under test returns.
 */
export function returnValueOf<T>(result: RunResult): T {
  assertEquals(result.isError, false, describeResult(result));
  return result.returnValue as T;
}

/**
 * Asserts that a run failed with this error type, a message that matches (when given) and no
 * return value.
 *
 * @param result The run's result.
 * @param type The expected `error.type`.
 * @param message A pattern for `error.message`.
 */
export function assertFails(result: RunResult, type: string, message?: RegExp): void {
  assertEquals(result.isError, true, describeResult(result));
  assertEquals(result.ok, false, describeResult(result));
  assertEquals(result.error?.type, type, describeResult(result));
  if (message) assertMatch(result.error?.message ?? "", message, describeResult(result));
  assertEquals(result.returnValue, undefined, describeResult(result));
}
