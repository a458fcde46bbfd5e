/**
 * Reading `/metrics` as Prometheus would: the text is parsed by the Prometheus project's own Python
 * client (`tests/fixtures/parse_metrics.py`, Debian's python3-prometheus-client, which `.ci/run`
 * installs), and checked beyond what that lax parser checks: a TYPE for every family, names, and
 * histograms whose buckets add up. (npm's `parse-prometheus-text-format` 1.1.1 drops the labels,
 * count and sum of a labelled histogram, so it cannot tell the languages' durations apart.)
 *
 * @module
 */
import { join } from "node:path";
import { assert, assertEquals } from "./_assert.ts";
import { commandSucceeds, runCommand } from "./_command.ts";
import { ROOT } from "./_env.ts";

/** One sample line. */
export interface Sample {
  /** The sample's name (`code_executor_runs_total`, `…_bucket`, `…_count`). */
  name: string;
  /** Its labels. */
  labels: Record<string, string>;
  /** Its value. */
  value: number;
}

/** One metric family. */
export interface MetricFamily {
  /** Its name (a counter's without `_total`, as the parser gives it). */
  name: string;
  /** `counter`, `gauge`, `histogram`, `summary`; `untyped` or `unknown` without a TYPE line. */
  type: string;
  /** Its HELP text. */
  help: string;
  /** Its samples. */
  samples: Sample[];
}

/** Debian's python3 (the Prometheus client is its package `python3-prometheus-client`). */
const PYTHON = "/usr/bin/python3";
const PARSER = join(ROOT, "tests", "fixtures", "parse_metrics.py");
const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;

/**
 * Whether the Prometheus Python client is installed for Debian's python3.
 *
 * @returns True when its parser imports.
 */
export function hasPrometheusParser(): Promise<boolean> {
  return commandSucceeds(PYTHON, ["-c", "import prometheus_client.parser"]);
}

/** Why the tests that parse `/metrics` were skipped. */
export const PARSER_MISSING =
  "python3-prometheus-client is not installed (apt-get install python3-prometheus-client): the tests that parse /metrics are skipped";

function labelKey(labels: Record<string, string>): string {
  return JSON.stringify(Object.entries(labels).filter(([k]) => k !== "le").sort());
}

/** Every histogram's buckets, per label set: cumulative, ending at `+Inf` with the count. */
function checkHistogram(family: MetricFamily): void {
  const groups = new Map<string, { buckets: Array<[number, number]>; count?: number }>();
  const group = (labels: Record<string, string>) => {
    const key = labelKey(labels);
    if (!groups.has(key)) groups.set(key, { buckets: [] });
    return groups.get(key)!;
  };
  for (const sample of family.samples) {
    if (sample.name === `${family.name}_bucket`) {
      group(sample.labels).buckets.push([
        Number(sample.labels.le.replace("Inf", "Infinity")),
        sample.value,
      ]);
    } else if (sample.name === `${family.name}_count`) {
      group(sample.labels).count = sample.value;
    }
  }
  for (const [key, { buckets, count }] of groups) {
    buckets.sort((a, b) => a[0] - b[0]);
    for (let i = 1; i < buckets.length; i++) {
      assert(
        buckets[i][1] >= buckets[i - 1][1],
        `${family.name}${key}: buckets are not cumulative`,
      );
    }
    assertEquals(buckets.at(-1), [Infinity, count], `${family.name}${key}: +Inf is not the count`);
  }
}

/**
 * Parses an exposition with the Prometheus client's parser and checks what that lax parser does
 * not: a TYPE for every family, valid names, histograms whose buckets add up.
 *
 * @param text The Prometheus text format.
 * @returns The families.
 * @throws {AssertionError} When the text does not parse or breaks the format's rules.
 */
export async function parseExposition(text: string): Promise<MetricFamily[]> {
  const run = await runCommand(PYTHON, [PARSER], { input: text });
  assertEquals(run.code, 0, `the parser failed: ${run.stderr}\n${text}`);
  const raw = JSON.parse(run.stdout) as Array<
    Omit<MetricFamily, "samples"> & { samples: Array<Omit<Sample, "value"> & { value: string }> }
  >;
  const families = raw.map((family) => ({
    ...family,
    samples: family.samples.map((sample) => ({
      ...sample,
      value: Number(sample.value.replace("inf", "Infinity")),
    })),
  }));
  for (const family of families) {
    assert(NAME.test(family.name), `bad metric name ${family.name}`);
    assert(!["untyped", "unknown"].includes(family.type), `${family.name} has no TYPE line`);
    if (family.type === "histogram") checkHistogram(family);
  }
  return families;
}

/**
 * GETs a `/metrics` URL and parses the answer.
 *
 * @param url The URL.
 * @param token A bearer token to send.
 * @returns The families.
 * @throws {AssertionError} Unless the answer is 200 in the Prometheus text format.
 */
export async function scrape(url: URL | string, token?: string): Promise<MetricFamily[]> {
  const response = await fetch(url, {
    headers: token === undefined ? {} : { authorization: `Bearer ${token}` },
  });
  const text = await response.text();
  assertEquals(response.status, 200, text);
  assert(
    (response.headers.get("content-type") ?? "").startsWith("text/plain; version=0.0.4"),
    `content-type ${response.headers.get("content-type")}`,
  );
  return await parseExposition(text);
}

function matches(sample: Sample, labels: Record<string, string>): boolean {
  return Object.keys(sample.labels).length === Object.keys(labels).length &&
    Object.entries(labels).every(([key, value]) => sample.labels[key] === value);
}

/**
 * The value of the sample with this name and exactly these labels.
 *
 * @param families What {@linkcode scrape} returned.
 * @param name The sample's name (`code_executor_runs_total`).
 * @param labels Its labels, all of them.
 * @returns The value; undefined when there is no such sample.
 */
export function valueOf(
  families: MetricFamily[],
  name: string,
  labels: Record<string, string> = {},
): number | undefined {
  for (const family of families) {
    const found = family.samples.find((sample) => sample.name === name && matches(sample, labels));
    if (found) return found.value;
  }
  return undefined;
}

/**
 * A histogram's count and sum.
 *
 * @param families What {@linkcode scrape} returned.
 * @param name The histogram.
 * @param labels Its labels, all of them (`le` aside).
 * @returns Its count and sum; zeros when there is no such histogram.
 */
export function histogramOf(
  families: MetricFamily[],
  name: string,
  labels: Record<string, string> = {},
): { count: number; sum: number } {
  return {
    count: valueOf(families, `${name}_count`, labels) ?? 0,
    sum: valueOf(families, `${name}_sum`, labels) ?? 0,
  };
}
