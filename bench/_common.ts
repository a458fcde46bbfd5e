/**
 * What the benchmarks share: progress on stderr, statistics of samples, the machine and its
 * processes as `/proc` shows them, a stdio MCP server with a connected client, timed calls, the
 * spawn-per-call baseline, command-line options and the markdown report.
 *
 * @module
 */
import { Client } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import { countTokens } from "gpt-tokenizer/encoding/o200k_base";
import { join } from "node:path";
import { parseArgs } from "node:util";

/**
 * Writes a progress line to stderr (stdout carries the report).
 *
 * @param message The line.
 */
export function log(message: string): void {
  console.error(`[bench] ${message}`);
}

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
export async function loadAverage(): Promise<string> {
  const text = await Deno.readTextFile("/proc/loadavg").catch(() => "");
  return text.split(" ").slice(0, 3).join(" ") || "unknown";
}

/** The machine a report was measured on. */
export interface MachineInfo {
  /** Logical CPUs. */
  nproc: number;
  /** The CPU's model name. */
  cpu: string;
  /** Deno's version. */
  deno: string;
  /** V8's version. */
  v8: string;
  /** The OS and its release. */
  os: string;
}

/** Describes this machine. */
export async function machineInfo(): Promise<MachineInfo> {
  const cpuinfo = await Deno.readTextFile("/proc/cpuinfo").catch(() => "");
  return {
    nproc: navigator.hardwareConcurrency,
    cpu: /^model name\s*:\s*(.+)$/m.exec(cpuinfo)?.[1]?.trim() ?? "unknown",
    deno: Deno.version.deno,
    v8: Deno.version.v8,
    os: `${Deno.build.os} ${Deno.osRelease()}`,
  };
}

/** The machine a report was measured on, and how busy it was meanwhile. */
export interface MachineReport extends MachineInfo {
  /** {@linkcode loadAverage} before the measurements. */
  loadBefore: string;
  /** {@linkcode loadAverage} after them. */
  loadAfter: string;
}

/**
 * Describes this machine once the measurements are done.
 *
 * @param loadBefore {@linkcode loadAverage} as it was before them.
 * @returns The machine, with the load average before and now.
 */
export async function machineReport(loadBefore: string): Promise<MachineReport> {
  return { ...await machineInfo(), loadBefore, loadAfter: await loadAverage() };
}

/**
 * The machine as the reports' first line names it.
 *
 * @param machine The machine.
 * @returns `N CPUs, model, OS, Deno x (V8 y); load average … before, … after`.
 */
export function machineText(machine: MachineReport): string {
  return `${machine.nproc} CPUs, ${machine.cpu}, ${machine.os}, Deno ${machine.deno} ` +
    `(V8 ${machine.v8}); load average ${machine.loadBefore} before, ${machine.loadAfter} after`;
}

/**
 * Reads the `kB` fields of `/proc/<pid>/status` (VmRSS, RssAnon, VmHWM, …).
 *
 * @param pid The process.
 * @returns Field name → MB.
 * @throws {Error} When the process has gone.
 */
export async function statusMb(pid: number): Promise<Record<string, number>> {
  const status = await Deno.readTextFile(`/proc/${pid}/status`);
  const fields: Record<string, number> = {};
  for (const match of status.matchAll(/^(\w+):\s+(\d+)\s+kB$/gm)) {
    fields[match[1]] = Number(match[2]) / 1024;
  }
  return fields;
}

/**
 * Reads a process's resident set size.
 *
 * @param pid The process.
 * @returns VmRSS in MB.
 * @throws {Error} When the process has gone.
 */
export async function residentMb(pid: number): Promise<number> {
  const rss = (await statusMb(pid)).VmRSS;
  if (rss === undefined) throw new Error(`Cannot read VmRSS of process ${pid}: no VmRSS line`);
  return rss;
}

/**
 * Lists a process's direct children.
 *
 * @param pid The process.
 * @returns Their pids; none once it has gone.
 */
export async function childPids(pid: number): Promise<number[]> {
  const pids: number[] = [];
  try {
    for await (const task of Deno.readDir(`/proc/${pid}/task`)) {
      const text = await Deno.readTextFile(`/proc/${pid}/task/${task.name}/children`)
        .catch(() => "");
      pids.push(...text.split(/\s+/).filter(Boolean).map(Number));
    }
  } catch {
    // The process exited while we looked.
  }
  return pids;
}

/**
 * Lists a process's descendants, breadth first.
 *
 * @param pid The process.
 * @returns Their pids.
 */
async function descendantPids(pid: number): Promise<number[]> {
  const found: number[] = [];
  const queue = [pid];
  while (queue.length > 0) {
    for (const child of await childPids(queue.shift()!)) {
      found.push(child);
      queue.push(child);
    }
  }
  return found;
}

/** The identity of a live process (its start time), or undefined once it has gone. */
async function processStart(pid: number): Promise<string | undefined> {
  try {
    const stat = await Deno.readTextFile(`/proc/${pid}/stat`);
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return fields[0] === "Z" ? undefined : fields[19];
  } catch {
    return undefined;
  }
}

/**
 * Snapshots a process and its descendants, with their start times, so that {@linkcode reap} can
 * tell them from later processes that reuse their pids.
 *
 * @param pid The root.
 * @returns Pid → start time.
 */
async function processTree(pid: number): Promise<Map<number, string>> {
  const tree = new Map<number, string>();
  for (const each of [pid, ...await descendantPids(pid)]) {
    const start = await processStart(each);
    if (start !== undefined) tree.set(each, start);
  }
  return tree;
}

/**
 * Waits for processes to exit, then SIGKILLs the ones still running (only if their start time
 * shows they are the same processes).
 *
 * @param processes From {@linkcode processTree}.
 * @param graceMs How long they may take.
 * @returns How many had to be killed.
 */
async function reap(processes: Map<number, string>, graceMs: number): Promise<number> {
  const deadline = Date.now() + graceMs;
  const alive = async () => {
    const left: number[] = [];
    for (const [pid, start] of processes) {
      if (await processStart(pid) === start) left.push(pid);
    }
    return left;
  };
  let left = await alive();
  while (left.length > 0 && Date.now() < deadline) {
    await sleep(50);
    left = await alive();
  }
  for (const pid of left) {
    try {
      Deno.kill(pid, "SIGKILL");
    } catch {
      // It exited in the meantime.
    }
  }
  return left.length;
}

/** A stdio MCP server started by a benchmark, with a connected SDK v2 client. */
export interface StdioServer {
  /** The connected client. */
  client: Client;
  /** The process the transport started. */
  pid: number;
  /** `performance.now()` just before the transport spawned the process. */
  spawnedAt: number;
  /** `performance.now()` once `connect()` resolved. */
  connectedAt: number;
  /** The last bytes the process wrote to stderr. */
  stderr(): string;
  /** Closes the client, then waits for the process and its descendants (SIGKILL after 5 s). */
  close(): Promise<void>;
}

/** Options for {@linkcode connectStdio}. */
export interface ConnectStdioOptions {
  /** How much of stderr to keep. */
  stderrBytes?: number;
  /** The options of `client.connect()` (`{ prior: { kind: "legacy" } }`: one spawn). */
  connect?: Parameters<Client["connect"]>[1];
  /** Registers the close, before connecting, with a clean-up that also runs on a signal. */
  cleanup?: { defer(step: () => Promise<void>): void };
}

/**
 * Starts a stdio MCP server and connects an SDK v2 client to it.
 *
 * @param name What progress lines and errors call it.
 * @param params The command, its arguments, environment and working directory.
 * @param options stderr kept, connect options, clean-up.
 * @returns The connection.
 * @throws {Error} When the client cannot connect; the error carries the server's stderr.
 */
export async function connectStdio(
  name: string,
  params: { command: string; args: string[]; env: Record<string, string>; cwd: string },
  options: ConnectStdioOptions = {},
): Promise<StdioServer> {
  const transport = new StdioClientTransport({ ...params, stderr: "pipe" });
  const keep = options.stderrBytes ?? 8192;
  let tail = "";
  const decoder = new TextDecoder();
  transport.stderr?.on("data", (chunk: Uint8Array) => {
    tail = (tail + decoder.decode(chunk, { stream: true })).slice(-keep);
  });
  const client = new Client({ name: "code-executor-bench", version: "1.0.0" });
  let closing: Promise<void> | undefined;
  const close = () =>
    closing ??= (async () => {
      // Take the tree first: once the parent has gone, its orphans can no longer be found.
      const pid = transport.pid;
      const tree = pid === null ? new Map<number, string>() : await processTree(pid);
      await client.close().catch(() => {});
      const killed = await reap(tree, 5_000);
      if (killed > 0) log(`${name}: ${killed} process(es) did not exit after close; killed`);
    })();
  options.cleanup?.defer(close);
  const spawnedAt = performance.now();
  try {
    await client.connect(transport, options.connect);
  } catch (error) {
    await close();
    throw new Error(`Cannot connect to ${name}: ${(error as Error).message}\n${tail}`, {
      cause: error,
    });
  }
  const connectedAt = performance.now();
  const pid = transport.pid;
  if (pid === null) {
    await close();
    throw new Error(`The stdio transport of ${name} has no process`);
  }
  return { client, pid, spawnedAt, connectedAt, stderr: () => tail, close };
}

/** What an MCP call cost. */
export interface CallTiming {
  /** `client.callTool()` wall time. */
  latencyMs: number;
  /** The server's own `durationMs`; NaN when it does not say. */
  serverMs: number;
}

/** The structured content of a `run_*` result, as far as the benchmarks read it. */
export interface CallOutcome {
  ok?: boolean;
  returnValue?: unknown;
  durationMs?: number;
  error?: { type?: string; message?: string };
}

/**
 * Calls a `run_*` tool and checks that it returned the expected value.
 *
 * @param server The connection.
 * @param tool `run_typescript` or `run_python`.
 * @param args The tool's arguments.
 * @param expected The `returnValue` a correct run gives.
 * @returns Its latency and the server's `durationMs`.
 * @throws {Error} When the run failed or returned something else; with the server's stderr.
 */
export async function timedRun(
  server: StdioServer,
  tool: string,
  args: Record<string, unknown>,
  expected: unknown,
): Promise<CallTiming> {
  const started = performance.now();
  const result = await server.client.callTool({ name: tool, arguments: args });
  const latencyMs = performance.now() - started;
  const outcome = (result.structuredContent ?? {}) as CallOutcome;
  if (result.isError || outcome.ok !== true || outcome.returnValue !== expected) {
    throw new Error(
      `${tool} did not return ${expected}: ${
        outcome.error ? `${outcome.error.type}: ${outcome.error.message}` : JSON.stringify(result)
      }\n${server.stderr()}`,
    );
  }
  return { latencyMs, serverMs: outcome.durationMs ?? NaN };
}

/** Above the default limits.maxTimeoutMs, so that a call asking for it is refused at once. */
const REFUSED_TIMEOUT_MS = 2_000_000_000;

/**
 * Calls a `run_*` tool with a `timeoutMs` the server must refuse before any sandbox work: the
 * latency is the MCP round trip (client, stdio, schema validation) on its own.
 *
 * @param server The connection.
 * @param tool `run_typescript` or `run_python`.
 * @param code The code, which never runs.
 * @returns The latency.
 * @throws {Error} When the server ran the call.
 */
export async function timedRefusal(
  server: StdioServer,
  tool: string,
  code: string,
): Promise<number> {
  const started = performance.now();
  const result = await server.client.callTool({
    name: tool,
    arguments: { code, timeoutMs: REFUSED_TIMEOUT_MS },
  });
  const latencyMs = performance.now() - started;
  if (!result.isError) throw new Error("The server ran a call it should have refused");
  return latencyMs;
}

/**
 * Runs `callers` loops at once, each making `calls` sequential calls.
 *
 * @param callers Loops in flight at once.
 * @param calls Calls per loop.
 * @param call One call.
 * @returns Every call's timing, and the wall time from the first call to the last result.
 */
export async function concurrentCalls(
  callers: number,
  calls: number,
  call: () => Promise<CallTiming>,
): Promise<{ latencies: number[]; serverTimes: number[]; elapsedMs: number }> {
  const latencies: number[] = [];
  const serverTimes: number[] = [];
  const loop = async () => {
    for (let i = 0; i < calls; i++) {
      const { latencyMs, serverMs } = await call();
      latencies.push(latencyMs);
      serverTimes.push(serverMs);
    }
  };
  const started = performance.now();
  await Promise.all(Array.from({ length: callers }, loop));
  return { latencies, serverTimes, elapsedMs: performance.now() - started };
}

/**
 * A bare `deno run --no-config -q tiny.ts`, ready to time one call at a time: the floor of any
 * spawn-per-call design.
 *
 * @returns `run()`, which times one run (and throws when the script fails), and `close()`,
 * which removes the script.
 */
export async function bareDenoRun(): Promise<{ run(): Promise<number>; close(): Promise<void> }> {
  const dir = await Deno.makeTempDir({ prefix: "ce-bench-bare-" });
  const script = join(dir, "tiny.ts");
  await Deno.writeTextFile(script, "const one: number = 1;\nif (one !== 1) Deno.exit(1);\n");
  const command = new Deno.Command(Deno.execPath(), {
    args: ["run", "--no-config", "-q", script],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  });
  return {
    async run() {
      const started = performance.now();
      const output = await command.output();
      const elapsed = performance.now() - started;
      if (!output.success) {
        throw new Error(
          `The bare deno run failed with code ${output.code}: ${
            new TextDecoder().decode(output.stderr)
          }`,
        );
      }
      return elapsed;
    },
    close: () => Deno.remove(dir, { recursive: true }).catch(() => {}),
  };
}

/**
 * Times {@linkcode bareDenoRun} per call.
 *
 * @param iterations Measured runs.
 * @param warmup Runs before them, not counted.
 * @returns The summary.
 * @throws {Error} When the script fails.
 */
export async function timeDenoRun(iterations: number, warmup: number): Promise<Stats> {
  const bare = await bareDenoRun();
  try {
    return stats(await repeat({ iterations, warmup }, () => bare.run()));
  } finally {
    await bare.close();
  }
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
  const flagOf = (key: string) => key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
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
