/**
 * `wrappers`: typed TypeScript and Python wrappers for every upstream server's tools.
 *
 * The output directory holds:
 * - `typescript/<module>.ts`: import it from `run_typescript` code granted read access to the
 *   directory;
 * - `python/mcp_wrappers/<module>.py`: the Python source, for reading;
 * - `python/mcp_wrappers_<module>-0.0.0-py3-none-any.whl`: the same module as a wheel, which
 *   `run_python` imports as `mcp_wrappers.<module>` once `python/` is in `python.wheelDirs`;
 * - `manifest.json`: per server, the hash of its tool schemas and of every file written.
 *
 * A server whose schemas and files match the manifest is not regenerated, and a file whose bytes
 * would not change is not written, so its mtime stays. Every write is atomic (a temporary file in
 * the same directory, then a rename). The manifest and the writes are `wrappers_output.ts`.
 *
 * @module
 */
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { moduleNames } from "../codegen/names.ts";
import { generatePython, PYTHON_PACKAGE } from "../codegen/python.ts";
import { generateTypescript, type WrapperTool } from "../codegen/typescript.ts";
import { buildWheel, wheelFileName } from "../codegen/wheel.ts";
import { loadSettings } from "../config/settings.ts";
import { defaultWrappersDir } from "../config/paths.ts";
import { discoverUpstreams } from "../config/upstream.ts";
import { createLogger, type Logger } from "../log.ts";
import { type Hub, openHub } from "../upstream/hub.ts";
import { SERVER_VERSION } from "../version.ts";
import { canonicalJson, sha256Hex } from "../_util.ts";
import {
  filesMatch,
  type Manifest,
  MANIFEST_VERSION,
  type ManifestEntry,
  readManifest,
  removeFile,
  writeIfChanged,
  writeManifest,
} from "./wrappers_output.ts";

/** Bumped whenever the generators' output changes, so that every server is regenerated. */
const FORMAT = 1;
const WHEEL_VERSION = "0.0.0";

/** Options of {@linkcode generateWrappers}. */
export interface GenerateWrappersOptions {
  /** The output directory. */
  out: string;
  /** Upstream config files, as given with `--config` (one or several). */
  config?: string | string[];
  /** Where progress and problems go. */
  log: Logger;
  /** Only these servers (by name); every configured server when omitted. */
  only?: string[];
  /**
   * Connections to reuse (left open); `config` is then ignored and the hub's own configuration
   * is used. Without it the servers are discovered and connected here, and closed afterwards.
   */
  hub?: Hub;
}

/** What happened to one server. */
export interface ServerWrappers {
  /** The server's name. */
  name: string;
  /** Its module name (`typescript/<module>.ts`, `mcp_wrappers.<module>`). */
  module?: string;
  /** Its number of tools, when they were listed. */
  tools?: number;
  /**
   * `written`: at least one of its files changed; `failed`: its tools could not be listed (its
   * earlier files stay); `removed`: no longer configured, so its files were deleted.
   */
  status: "written" | "unchanged" | "failed" | "removed";
  /** Why it failed. */
  error?: string;
}

/** Result of {@linkcode generateWrappers}. */
export interface GenerateWrappersResult {
  /** Absolute paths of the files written (the manifest included when it changed). */
  written: string[];
  /** Absolute paths of the files left as they were. */
  unchanged: string[];
  /** Absolute paths of the files deleted (servers no longer configured). */
  removed: string[];
  /** Each server in scope, sorted by name. */
  servers: ServerWrappers[];
}

/**
 * Connects to the configured upstream servers, lists their tools and writes their wrappers to
 * `options.out`, regenerating only servers whose schemas changed. A server that cannot be
 * reached keeps its earlier files; one that is no longer configured loses them (unless `only`
 * is given). Every connection is closed before it returns.
 *
 * @param options Output directory, config files, logger and server filter.
 * @returns The files written, left unchanged and removed, and each server's status.
 * @throws {Error} When the configuration or the settings cannot be read, or a file cannot be
 * written.
 *
 * @example
 * ```ts
 * const { written } = await generateWrappers({ out: "/tmp/wrappers", log: createLogger() });
 * ```
 */
export async function generateWrappers(
  options: GenerateWrappersOptions,
): Promise<GenerateWrappersResult> {
  const out = resolve(options.out);
  const log = options.log;
  const configPaths = options.config === undefined
    ? []
    : Array.isArray(options.config)
    ? options.config
    : [options.config];
  const upstream = options.hub?.config ?? await discoverUpstreams({ configPaths });
  for (const broken of upstream.broken) log.warn(broken.error);

  const configured = new Set(upstream.servers.map((server) => server.name));
  const known = new Set([...configured, ...upstream.broken.map((server) => server.name)]);
  const only = options.only ? new Set(options.only) : undefined;
  const previous = await readManifest(join(out, "manifest.json"), log);
  const manifest: Manifest = {
    version: MANIFEST_VERSION,
    generator: `code-executor ${SERVER_VERSION}`,
    servers: {},
  };
  const result: GenerateWrappersResult = { written: [], unchanged: [], removed: [], servers: [] };

  // Servers out of scope, or unreachable now, keep their entries; the rest are decided below.
  const targets = [...configured].filter((name) => !only || only.has(name)).sort();
  for (const name of only ?? []) {
    if (!configured.has(name)) {
      const error = known.has(name)
        ? `Cannot generate wrappers for "${name}": its configuration is unusable`
        : `Cannot generate wrappers for "${name}": no such server is configured`;
      log.warn(error);
      result.servers.push({ name, status: "failed", error });
    }
  }
  const modules = moduleNames(
    [...new Set([...configured, ...Object.keys(previous?.servers ?? {})])],
    new Map(Object.entries(previous?.servers ?? {}).map(([name, entry]) => [name, entry.module])),
  );

  const hub = options.hub ?? await openHub(upstream, (await loadSettings()).settings, { log });
  let listed: PromiseSettledResult<WrapperTool[]>[];
  try {
    listed = await Promise.allSettled(targets.map((name) => hub.pool.listTools(name)));
  } finally {
    if (!options.hub) await hub.close();
  }

  for (const [index, name] of targets.entries()) {
    const outcome = listed[index];
    const before = previous?.servers[name];
    if (outcome.status === "rejected") {
      const error = (outcome.reason as Error).message;
      log.warn(`Cannot generate wrappers for "${name}": ${error}; its earlier files stay`);
      if (before) {
        manifest.servers[name] = before;
        result.unchanged.push(...Object.keys(before.files).map((file) => join(out, file)));
      }
      result.servers.push({ name, module: before?.module, status: "failed", error });
      continue;
    }
    const module = modules.get(name)!;
    const tools = canonicalTools(outcome.value);
    const { entry, changed } = await updateServer(name, tools, { out, module, before, result });
    manifest.servers[name] = entry;
    result.servers.push({
      name,
      module,
      tools: tools.length,
      status: changed ? "written" : "unchanged",
    });
    log.info(`${name}: ${tools.length} tools, ${changed ? "written" : "unchanged"}`);
  }

  for (const [name, entry] of Object.entries(previous?.servers ?? {})) {
    if (manifest.servers[name] || targets.includes(name)) continue;
    if (only || known.has(name)) {
      // Out of scope of this run, or configured but unusable right now: keep as it is.
      manifest.servers[name] = entry;
      continue;
    }
    for (const file of Object.keys(entry.files)) {
      if (await removeFile(join(out, file))) result.removed.push(join(out, file));
    }
    result.servers.push({ name, module: entry.module, status: "removed" });
    log.info(`${name}: no longer configured, its wrappers were removed`);
  }

  const manifestPath = join(out, "manifest.json");
  if (await writeManifest(manifestPath, manifest)) result.written.push(manifestPath);
  else result.unchanged.push(manifestPath);
  result.servers.sort((a, b) => a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
  return result;
}

/** What became of one listed server's files. */
interface ServerUpdate {
  /** Its manifest entry now. */
  entry: ManifestEntry;
  /** Whether any of its files was written. */
  changed: boolean;
}

/**
 * Brings one listed server's files up to date, recording each file in `result`: nothing is
 * written when its schemas, module name and files match its manifest entry; otherwise its files
 * are rendered, the changed ones written, and those of an earlier module name removed.
 */
async function updateServer(
  name: string,
  tools: WrapperTool[],
  context: { out: string; module: string; before?: ManifestEntry; result: GenerateWrappersResult },
): Promise<ServerUpdate> {
  const { out, module, before, result } = context;
  const hash = sha256Hex(canonicalJson({ format: FORMAT, server: name, module, tools }));
  if (
    before && before.hash === hash && before.module === module && await filesMatch(out, before)
  ) {
    result.unchanged.push(...Object.keys(before.files).map((file) => join(out, file)));
    return { entry: before, changed: false };
  }
  const entry: ManifestEntry = { module, hash, tools: tools.length, files: {} };
  let changed = false;
  for (const [file, bytes] of renderServer(name, module, tools, hash)) {
    entry.files[file] = sha256Hex(bytes);
    const path = join(out, file);
    if (await writeIfChanged(path, bytes)) {
      result.written.push(path);
      changed = true;
    } else {
      result.unchanged.push(path);
    }
  }
  // Files of an earlier module name (the server was renamed around a collision).
  for (const file of Object.keys(before?.files ?? {})) {
    if (entry.files[file] === undefined && await removeFile(join(out, file))) {
      result.removed.push(join(out, file));
    }
  }
  return { entry, changed };
}

/** The files of one server: path relative to the output directory → bytes. */
function renderServer(
  server: string,
  module: string,
  tools: WrapperTool[],
  hash: string,
): Array<[string, Uint8Array]> {
  const encoder = new TextEncoder();
  const stamp = `Schema hash ${hash.slice(0, 16)} (see manifest.json).`;
  const typescript = generateTypescript(server, tools, { stamp });
  const python = generatePython(server, tools, { module, stamp });
  const distribution = `${PYTHON_PACKAGE}_${module}`;
  const wheel = buildWheel({ [`${PYTHON_PACKAGE}/${module}.py`]: python }, {
    distribution,
    version: WHEEL_VERSION,
    summary: `Typed wrappers for the tools of the MCP server ${JSON.stringify(server)}`,
  });
  return [
    [`typescript/${module}.ts`, encoder.encode(typescript)],
    [`python/${PYTHON_PACKAGE}/${module}.py`, encoder.encode(python)],
    [`python/${wheelFileName(distribution, WHEEL_VERSION)}`, wheel],
  ];
}

/** The parts of each tool the wrappers depend on, sorted by name. */
function canonicalTools(tools: WrapperTool[]): WrapperTool[] {
  return tools.map((tool) => ({
    name: String(tool.name),
    ...(typeof tool.description === "string" ? { description: tool.description } : {}),
    inputSchema: tool.inputSchema,
    ...(tool.outputSchema !== undefined ? { outputSchema: tool.outputSchema } : {}),
  })).sort((a, b) => a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
}

/** Options of {@linkcode wrappers}. */
export interface WrappersCommandOptions {
  /** Upstream config files given with `--config`. */
  configPaths: string[];
  /** `--out DIR`; {@linkcode defaultWrappersDir} when omitted. */
  out?: string;
  /** `--only NAME`, repeatable. */
  only?: string[];
  /** Write text here instead of stdout (tests). */
  write?: (text: string) => void;
}

/**
 * The `wrappers` command: generates the wrappers and prints what it did and how to use them.
 *
 * @param options The command line options.
 * @returns The exit code: 0 when every server in scope was generated, 1 otherwise.
 */
export async function wrappers(options: WrappersCommandOptions): Promise<number> {
  const encoder = new TextEncoder();
  const write = options.write ?? ((text: string) => Deno.stdout.writeSync(encoder.encode(text)));
  const out = resolve(options.out ?? defaultWrappersDir());
  const result = await generateWrappers({
    out,
    config: options.configPaths,
    log: createLogger("warn"),
    only: options.only,
  });
  const rows = result.servers.map((server) => [
    server.name,
    server.module ?? "-",
    server.tools === undefined ? "-" : `${server.tools} tools`,
    server.status === "failed" ? `failed: ${server.error}` : server.status,
  ]);
  const widths = [0, 1, 2].map((i) => Math.max(0, ...rows.map((row) => row[i].length)));
  write(`Wrappers in ${out}\n`);
  write(
    rows.length === 0
      ? "  (no MCP servers are configured: add them with --config mcp.json)\n"
      : rows.map((row) =>
        `  ${row.map((cell, i) => i < 3 ? cell.padEnd(widths[i]) : cell).join("  ")}\n`
      ).join(""),
  );
  write(
    `${result.written.length} files written, ${result.unchanged.length} unchanged, ${result.removed.length} removed\n`,
  );
  const example = result.servers.find((server) => server.module && server.status !== "removed");
  if (example?.module) {
    const tsFile = join(out, "typescript", `${example.module}.ts`);
    write(
      `\nTypeScript (run_typescript with permissions.read ["${
        join(out, "typescript")
      }"], under ALLOWED_PROJECTS):\n  import * as ${example.module} from "${
        pathToFileURL(tsFile).href
      }";\n`,
    );
    write(
      `Python (add "${join(out, "python")}" to python.wheelDirs, then restart the server):\n` +
        `  from ${PYTHON_PACKAGE} import ${example.module}\n`,
    );
  }
  const failed = result.servers.filter((server) => server.status === "failed").length;
  if (failed > 0) write(`\n${failed} server(s) failed; see above\n`);
  return failed > 0 ? 1 : 0;
}

const USAGE = `Usage: code-executor wrappers [--config PATH]... [--out DIR] [--only SERVER]...

Generates typed TypeScript and Python wrappers for the tools of every configured MCP server.

  --config PATH   An MCP config file with the upstream servers; repeatable
  --out DIR       Where to write them (default: ~/.code-executor/wrappers)
  --only SERVER   Only this server; repeatable
`;

/**
 * Parses the `wrappers` command's own arguments and runs {@linkcode wrappers}.
 *
 * @param args The arguments after `wrappers`.
 * @returns The exit code.
 * @throws {TypeError} When an argument is unknown or malformed.
 */
export async function wrappersCommand(args: string[]): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({
      args,
      allowPositionals: false,
      options: {
        config: { type: "string", multiple: true },
        out: { type: "string" },
        only: { type: "string", multiple: true },
        help: { type: "boolean", short: "h" },
      },
    });
  } catch (error) {
    throw new TypeError(`Invalid arguments for wrappers: ${(error as Error).message}`);
  }
  const { values } = parsed;
  if (values.help) {
    Deno.stdout.writeSync(new TextEncoder().encode(USAGE));
    return 0;
  }
  return await wrappers({ configPaths: values.config ?? [], out: values.out, only: values.only });
}
