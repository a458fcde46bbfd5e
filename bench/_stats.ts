/**
 * How the benchmarks take and summarise samples: rounds run one after the other or interleaved
 * between arms, and their median, percentiles and ratios.
 *
 * @module
 */

/**
 * Waits.
 *
 * @param ms How long.
 */
export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * Rounds to a number of decimal digits.
 *
 * @param value The number.
 * @param digits Decimal digits to keep.
 * @returns The rounded number.
 */
export function round(value: number, digits = 1): number {
  const scale = 10 ** digits;
  return Math.round(value * scale) / scale;
}

/**
 * A ratio to two decimals, as the reports quote them.
 *
 * @param value The measurement.
 * @param base What it is compared with.
 * @returns `value / base`, rounded.
 */
export function ratio(value: number, base: number): number {
  return round(value / base, 2);
}

/**
 * The nearest-rank percentile: the smallest sample with at least `p` of the samples at or below
 * it.
 *
 * @param sorted Samples in ascending order.
 * @param p The fraction, from 0 to 1.
 * @returns The sample.
 */
export function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.ceil(sorted.length * p) - 1)];
}

/**
 * The arithmetic mean.
 *
 * @param samples The samples.
 * @returns Their mean (NaN when there are none).
 */
export function mean(samples: readonly number[]): number {
  return samples.reduce((sum, x) => sum + x, 0) / samples.length;
}

/** A summary of latency samples, in milliseconds. */
export interface Stats {
  /** How many samples. */
  n: number;
  /** The median (the mean of the middle two for an even count). */
  medianMs: number;
  /** The nearest-rank 95th percentile. */
  p95Ms: number;
  /** The smallest sample. */
  minMs: number;
  /** The largest sample. */
  maxMs: number;
}

/**
 * Summarizes samples.
 *
 * @param samples Latencies in milliseconds.
 * @param digits Decimal digits to keep.
 * @returns The summary.
 * @throws {RangeError} When there are no samples.
 */
export function stats(samples: readonly number[], digits = 2): Stats {
  if (samples.length === 0) throw new RangeError("Cannot summarize an empty sample");
  const sorted = [...samples].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  const median = sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
  return {
    n: sorted.length,
    medianMs: round(median, digits),
    p95Ms: round(percentile(sorted, 0.95), digits),
    minMs: round(sorted[0], digits),
    maxMs: round(sorted[sorted.length - 1], digits),
  };
}

/**
 * Runs `fn` `warmup + iterations` times, one after the other, and keeps what the measured runs
 * (the last `iterations`) return.
 *
 * @param counts Warm-up and measured runs.
 * @param fn One run; it is told whether it is measured.
 * @returns The measured runs' results, in order.
 */
export async function repeat<T>(
  counts: { iterations: number; warmup: number },
  fn: (measured: boolean) => Promise<T>,
): Promise<T[]> {
  const kept: T[] = [];
  for (let i = 0; i < counts.warmup + counts.iterations; i++) {
    const value = await fn(i >= counts.warmup);
    if (i >= counts.warmup) kept.push(value);
  }
  return kept;
}

/** The 1, 5 and 15 minute load averages: other work on the machine skews the numbers. */

/** Options for {@linkcode runPaired}. */
export interface RunPairedOptions<A extends string, T> {
  /** The arms compared, in the order the first round takes them. */
  arms: readonly A[];
  /** Measured rounds; each takes one sample of every arm. */
  rounds: number;
  /** Rounds run before them and not kept (none by default). */
  warmup?: number;
  /** Takes one sample of an arm; `round` counts the warm-up rounds too. */
  sample: (arm: A, round: number) => Promise<T>;
  /** Called after each measured round with its samples, for progress lines. */
  onRound?: (round: number, samples: Record<A, T>) => void;
}

/**
 * Runs interleaved rounds: each round samples every arm once, starting one arm later than the
 * round before (A B, B A for two arms; A B C, B C A, C A B for three), so that the machine's drift
 * over minutes, and the cost of running right after another arm, reach every arm alike.
 *
 * @param options The arms, the rounds and how to take a sample.
 * @returns Each arm's measured samples in round order: round `i` of one arm pairs with round `i`
 *   of every other.
 *
 * @example
 * ```ts
 * const samples = await runPaired({
 *   arms: ["off", "ask"] as const,
 *   rounds: 15,
 *   sample: (mode) => timedCalls(servers[mode], 200),
 * });
 * const pairedRatios = samples.ask.map((ms, i) => ms / samples.off[i]);
 * ```
 */
export async function runPaired<A extends string, T>(
  options: RunPairedOptions<A, T>,
): Promise<Record<A, T[]>> {
  const { arms } = options;
  const warmup = options.warmup ?? 0;
  const kept = Object.fromEntries(arms.map((arm) => [arm, [] as T[]])) as Record<A, T[]>;
  for (let round = 0; round < warmup + options.rounds; round++) {
    const taken = {} as Record<A, T>;
    for (let k = 0; k < arms.length; k++) {
      const arm = arms[(round + k) % arms.length];
      taken[arm] = await options.sample(arm, round);
    }
    if (round < warmup) continue;
    for (const arm of arms) kept[arm].push(taken[arm]);
    options.onRound?.(round - warmup, taken);
  }
  return kept;
}
