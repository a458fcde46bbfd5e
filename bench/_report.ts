/**
 * A benchmark's command line and report: progress on stderr, integer options and flags, tokens
 * counted as a client would, and the markdown or JSON printed on stdout.
 *
 * @module
 */
import { countTokens } from "gpt-tokenizer/encoding/o200k_base";
import { parseArgs } from "node:util";
import { loadAverage } from "./_machine.ts";

/**
 * Writes a progress line to stderr (stdout carries the report).
 *
 * @param message The line.
 */
export function log(message: string): void {
  console.error(`[bench] ${message}`);
}

/**
 * Counts o200k tokens of a value as a client receives it (its JSON).
 *
 * @param value The value; undefined counts as nothing.
 * @returns The token count.
 */
export function tokensOf(value: unknown): number {
  return value === undefined ? 0 : countTokens(JSON.stringify(value));
}

/** An integer option: its default and its smallest allowed value (1 unless said). */
export interface IntOption {
  /** The value when the option is not given. */
  fallback: number;
  /** The smallest value allowed. */
  min?: number;
}

/** The command-line name of a camelCase option key: `pauseMs` is `pause-ms`. */
function flagOf(key: string): string {
  return key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
}

/**
 * Parses an integer option.
 *
 * @param raw The option's text, if given.
 * @param name The option, for the error.
 * @param option Its default and minimum.
 * @returns The value.
 * @throws {TypeError} When it is not an integer of at least the minimum.
 */
function intOption(raw: string | undefined, name: string, option: IntOption): number {
  if (raw === undefined) return option.fallback;
  const min = option.min ?? 1;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min) {
    throw new TypeError(`Invalid --${name} "${raw}": expected an integer of at least ${min}`);
  }
  return value;
}

/** What {@linkcode parseBenchArgs} found. */
export interface BenchArgs<K extends string> {
  /** The integer options, by their camelCase key. */
  ints: Record<K, number>;
  /** The boolean flags given, by their command-line name. */
  flags: Set<string>;
  /** Whether `--json` asked for a JSON report. */
  json: boolean;
}

/**
 * Parses a benchmark's command line: integer options, boolean flags, `--json` and `--help`
 * (which prints `usage` instead).
 *
 * @param args The arguments.
 * @param usage The usage line.
 * @param ints Integer options by camelCase key (`pauseMs` is `--pause-ms`), in the order they
 *   are checked and reported.
 * @param flags More boolean options, by their command-line name.
 * @returns The values, or undefined after `--help`.
 * @throws {TypeError} On an unknown option or an invalid integer.
 *
 * @example
 * ```ts
 * const parsed = parseBenchArgs(Deno.args, "Usage: …", {
 *   iterations: { fallback: 60 },
 *   pauseMs: { fallback: 250, min: 0 },
 * });
 * if (parsed) console.log(parsed.ints.pauseMs, parsed.json);
 * ```
 */
export function parseBenchArgs<K extends string>(
  args: string[],
  usage: string,
  ints: Record<K, IntOption>,
  flags: readonly string[] = [],
): BenchArgs<K> | undefined {
  const options: Record<string, { type: "string" | "boolean"; short?: string }> = {};
  for (const key of Object.keys(ints)) options[flagOf(key)] = { type: "string" };
  for (const name of flags) options[name] = { type: "boolean" };
  options.json = { type: "boolean" };
  options.help = { type: "boolean", short: "h" };
  const { values } = parseArgs({ args, options });
  if (values.help) {
    console.log(usage);
    return undefined;
  }
  const parsed = {} as Record<K, number>;
  for (const [key, option] of Object.entries(ints) as Array<[K, IntOption]>) {
    const flag = flagOf(key);
    parsed[key] = intOption(values[flag] as string | undefined, flag, option);
  }
  return {
    ints: parsed,
    flags: new Set(flags.filter((name) => values[name] === true)),
    json: values.json === true,
  };
}

/**
 * A markdown table row.
 *
 * @param cells The cells; null and undefined are empty.
 * @returns `| a | b |`.
 */
export function row(cells: ReadonlyArray<string | number | null | undefined>): string {
  return `| ${cells.map((c) => c ?? "").join(" | ")} |`;
}

/**
 * A target's status cell.
 *
 * @param met Whether it was met; null for a target that is only reported.
 * @returns The cell's text.
 */
export function status(met: boolean | null): string {
  return met === null ? "reported" : met ? "met" : "**not met**";
}

/**
 * Prints the report: JSON with `--json`, else markdown.
 *
 * @param json Whether to print JSON.
 * @param report The report.
 * @param render Its markdown.
 */
export function printReport<R>(json: boolean, report: R, render: (report: R) => string): void {
  console.log(json ? JSON.stringify(report, null, 2) : render(report));
}

/**
 * Runs a benchmark's `main` with the process's arguments; a failure prints its stack and exits 1.
 *
 * @param main The benchmark.
 */
export async function runBench(main: (args: string[]) => Promise<void>): Promise<void> {
  try {
    await main(Deno.args);
  } catch (error) {
    console.error(`bench: ${(error as Error).stack ?? error}`);
    Deno.exit(1);
  }
}

/** What a benchmark run by {@linkcode runBenchWithOptions} gets. */
export interface BenchStart<K extends string> extends BenchArgs<K> {
  /** The load average read before the benchmark started, for its report's machine section. */
  loadBefore: string;
}

/**
 * Runs a benchmark whose command line is its integer options and `--json`, as
 * {@linkcode runBench} does: `--help` prints a usage line made from the options and their
 * defaults; otherwise `main` gets the values and the load average read before it starts.
 *
 * @param script The benchmark's path from the repository root, for the usage line.
 * @param ints Integer options by camelCase key, as {@linkcode parseBenchArgs} takes them.
 * @param main The benchmark.
 *
 * @example
 * ```ts
 * await runBenchWithOptions("bench/faults.ts", { rounds: { fallback: 10 } }, async (bench) => {
 *   console.log(bench.ints.rounds, bench.loadBefore);
 * });
 * ```
 */
export async function runBenchWithOptions<K extends string>(
  script: string,
  ints: Record<K, IntOption>,
  main: (bench: BenchStart<K>) => Promise<void>,
): Promise<void> {
  const options = Object.entries<IntOption>(ints).map(([key, option]) =>
    `[--${flagOf(key)} ${option.fallback}]`
  );
  const usage = `Usage: deno run -A ${script} ${options.join(" ")} [--json]`;
  await runBench(async (args) => {
    const parsed = parseBenchArgs(args, usage, ints);
    if (parsed) await main({ ...parsed, loadBefore: await loadAverage() });
  });
}
