/**
 * The tool catalog: every upstream tool under its full name `mcp__<server>__<tool>`, ranked
 * search, schemas cached in memory and on disk, and one compiled validator per schema.
 *
 * @module
 */
import Ajv from "ajv";
import Ajv2020 from "ajv/dist/2020";
import addFormats from "ajv-formats";
import { assertSchemaCost, linearRegExp } from "../schema_limits.ts";
import { dirname, join } from "node:path";
import type { Logger } from "../log.ts";
import type { UpstreamPool, UpstreamTool } from "./pool.ts";
import { fullToolName, proxyName, type ToolInfo } from "./signatures.ts";

/** A catalog entry: an upstream tool and where it lives. */
export interface CatalogEntry extends ToolInfo {
  /** `mcp__<server>__<tool>`. */
  fullName: string;
}

/** A server's place in the catalog. */
export interface ServerSummary {
  /** Server name. */
  name: string;
  /** Number of tools, when they have been listed. */
  tools?: number;
  /** Why its tools are unavailable. */
  error?: string;
  /** Set while its first listing is under way. */
  loading?: true;
}

/** Options of {@linkcode ToolCatalog}. */
export interface ToolCatalogOptions {
  /** Where problems are reported. */
  log: Logger;
  /** Hash of the upstream configuration; the disk cache is valid only for the same hash. */
  configHash: string;
  /** The disk cache file; no disk cache when omitted. */
  cacheFile?: string;
  /** Called after a server's tool list changed. */
  onChange?: () => void;
}

/** A validation failure, already phrased for the code that made the call. */
export type Validate = (args: unknown) => string | undefined;

/** 2: entries carry `annotations` (a cache without them would hide destructive tools). */
const CACHE_VERSION = 2;

/** An Ajv instance, as far as this module uses it. */
export type AjvLike = {
  compile(schema: unknown): ((data: unknown) => boolean) & {
    errors?:
      | Array<{ instancePath: string; message?: string; params: Record<string, unknown> }>
      | null;
  };
};

/**
 * Makes the Ajv instance that checks arguments (all errors, formats, not strict about unknown
 * keywords): draft 2020-12 or draft-07.
 *
 * @param draft2020 Whether the schemas it compiles declare draft 2020-12.
 * @returns The instance.
 */
export function makeAjv(draft2020: boolean): AjvLike {
  // Patterns run on RE2 (linear time): these schemas come from callers and upstream servers, and
  // validation runs on the event loop (src/schema_limits.ts).
  const options = {
    allErrors: true,
    strict: false,
    validateFormats: true,
    code: { regExp: linearRegExp },
  };
  // The packages are CommonJS; their default export is the class.
  const ajv = draft2020
    ? new (Ajv2020 as unknown as new (o: unknown) => AjvLike)(options)
    : new (Ajv as unknown as new (o: unknown) => AjvLike)(options);
  (addFormats as unknown as (a: AjvLike) => void)(ajv);
  const compile = ajv.compile.bind(ajv);
  // A schema too costly to check does not compile, as a malformed one does not.
  ajv.compile = (schema) => {
    assertSchemaCost(schema);
    return compile(schema);
  };
  return ajv;
}

/**
 * Phrases Ajv's errors for the code that made the call: each names the argument to change.
 *
 * @param fullName What was called (a tool's full name, or a skill).
 * @param errors Ajv's errors.
 * @param hint Where the schema can be read; `see getToolSchema("<fullName>")` by default.
 * @returns The message.
 */
export function describeValidationErrors(
  fullName: string,
  errors: Array<{ instancePath: string; message?: string; params: Record<string, unknown> }>,
  hint = `see getToolSchema("${fullName}")`,
): string {
  const parts = errors.slice(0, 5).map((error) => {
    const where = error.instancePath
      ? `"${error.instancePath.slice(1).replaceAll("/", ".")}"`
      : "arguments";
    if (error.params.missingProperty !== undefined) {
      return `missing required argument "${
        [error.instancePath.slice(1).replaceAll("/", "."), error.params.missingProperty]
          .filter(Boolean).join(".")
      }"`;
    }
    if (error.params.additionalProperty !== undefined) {
      return `unexpected argument "${error.params.additionalProperty}"`;
    }
    if (error.params.allowedValues !== undefined) {
      return `${where} must be one of ${JSON.stringify(error.params.allowedValues)}`;
    }
    return `${where} ${error.message ?? "is invalid"}`;
  });
  const more = errors.length > 5 ? ` (and ${errors.length - 5} more)` : "";
  return `Invalid arguments for ${fullName}: ${parts.join("; ")}${more}; ${hint}`;
}

function normalise(name: string): string {
  return name.toLowerCase().replace(/[^a-z0-9]/g, "");
}

/**
 * Splits a search query into lower-case terms (on white space and commas).
 *
 * @param query The query.
 * @returns The terms; none for an empty query.
 */
export function searchTerms(query: string): string[] {
  return query.toLowerCase().split(/[\s,]+/).filter(Boolean);
}

/** What a search ranks: a tool of the catalog, or anything named and described like one. */
export interface Searchable {
  /** The name code calls it by (`mcp__<server>__<tool>`, `skill:<name>@<version>`). */
  fullName: string;
  /** Its own name. */
  name: string;
  /** Its server (`skills` for a saved skill). */
  server: string;
  /** What it does. */
  description?: string;
}

/**
 * Scores how well an item matches search terms: an exact name counts most, then a name that
 * contains a term, the server's name, a word of the description, and a bonus when every term
 * matched; an item whose description says it is deprecated ranks below every other match.
 * `search_tools` ranks upstream tools and saved skills together with it.
 *
 * @param terms The query's terms ({@linkcode searchTerms}).
 * @param item The tool or skill.
 * @returns 0 when nothing matches.
 */
export function matchScore(terms: string[], item: Searchable): number {
  const name = item.name.toLowerCase();
  const normalisedName = normalise(item.name);
  const server = item.server.toLowerCase();
  const description = (item.description ?? "").toLowerCase();
  let score = 0;
  let matched = 0;
  for (const term of terms) {
    let s = 0;
    if (item.fullName.toLowerCase() === term || name === term) s += 20;
    else if (name.includes(term) || normalisedName.includes(normalise(term))) s += 8;
    if (server.includes(term)) s += 4;
    if (new RegExp(`\\b${term.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}`).test(description)) {
      s += 3;
    } else if (description.includes(term)) s += 1;
    if (s > 0) matched++;
    score += s;
  }
  if (score > 0 && matched === terms.length) score += 5 * terms.length;
  // Below 1, under every match that is not deprecated (the least of which scores 1), and in the
  // same order among deprecated ones: a replacement that matches ranks above what it replaces.
  return score > 0 && isDeprecated(item.description) ? score / (score + 1) : score;
}

/**
 * Whether a description says its tool is deprecated: it starts so (`Deprecated: use …`,
 * `[DEPRECATED]`, `⚠️ Deprecated`), marks it (`(deprecated)`, `@deprecated`), or says "this tool is
 * deprecated". A description that merely mentions a deprecated thing ("replaces the deprecated
 * foo") does not count: that is how a replacement describes itself.
 *
 * @param description The tool's description.
 * @returns True when the tool itself is deprecated.
 */
export function isDeprecated(description: string | undefined): boolean {
  if (!description) return false;
  return /^[^\p{L}\p{N}]*deprecated\b/iu.test(description) ||
    /[[(]deprecated[\])]|@deprecated\b/i.test(description) ||
    /\b(?:this|the) (?:tool|function|method|endpoint|command|operation|api) is (?:now )?deprecated\b/i
      .test(description);
}

/**
 * Every upstream tool, listed on demand and cached.
 */
export class ToolCatalog {
  #pool: UpstreamPool;
  #options: ToolCatalogOptions;
  #tools = new Map<string, UpstreamTool[]>();
  #errors = new Map<string, string>();
  #listing = new Map<string, Promise<void>>();
  #validators = new Map<string, Validate>();
  #ajv07: AjvLike | undefined;
  #ajv2020: AjvLike | undefined;
  #saving: Promise<void> = Promise.resolve();

  /**
   * Creates an empty catalog; servers are listed on first use, not here.
   *
   * @param pool The upstream connections.
   * @param options Cache location, config hash and change callback.
   */
  constructor(pool: UpstreamPool, options: ToolCatalogOptions) {
    this.#pool = pool;
    this.#options = options;
  }

  /** Loads tool lists saved by an earlier run with the same configuration. */
  async loadCache(): Promise<void> {
    if (!this.#options.cacheFile) return;
    try {
      const raw = JSON.parse(await Deno.readTextFile(this.#options.cacheFile));
      if (raw?.version !== CACHE_VERSION || raw?.configHash !== this.#options.configHash) return;
      for (const [server, tools] of Object.entries(raw.servers ?? {})) {
        if (this.#pool.config(server) && Array.isArray(tools)) {
          this.#tools.set(server, tools as UpstreamTool[]);
        }
      }
    } catch {
      // No cache yet, or an unreadable one: tools are listed on demand.
    }
  }

  /**
   * Saves the lists, one save at a time: servers listed side by side each ask for a save, and
   * two writes racing through one temp file could leave the older list behind (seen under load:
   * a cache that lacked one of two servers).
   */
  #saveCache(): Promise<void> {
    const next = this.#saving.then(() => this.#writeCache());
    this.#saving = next.catch(() => {});
    return next;
  }

  async #writeCache(): Promise<void> {
    const file = this.#options.cacheFile;
    if (!file) return;
    const data = {
      version: CACHE_VERSION,
      configHash: this.#options.configHash,
      servers: Object.fromEntries(this.#tools),
    };
    try {
      await Deno.mkdir(dirname(file), { recursive: true });
      const temp = `${file}.${Deno.pid}.tmp`;
      await Deno.writeTextFile(temp, JSON.stringify(data));
      await Deno.rename(temp, file);
    } catch (error) {
      this.#options.log.debug(`Cannot write the tool cache ${file}: ${(error as Error).message}`);
    }
  }

  /**
   * Lists the tools of servers not listed yet, in parallel. Failures are recorded per server.
   *
   * @param servers Which servers; all when omitted.
   */
  async ensure(servers: string[] = this.#pool.names): Promise<void> {
    await Promise.all(servers.map((server) => this.#list(server)));
  }

  #list(server: string, force = false): Promise<void> {
    if (!force && this.#tools.has(server)) return Promise.resolve();
    let job = this.#listing.get(server);
    if (job) return job;
    job = this.#pool.listTools(server).then(
      (tools) => {
        this.#tools.set(server, tools);
        this.#errors.delete(server);
        for (const key of this.#validators.keys()) {
          if (key.startsWith(`mcp__${server}__`)) this.#validators.delete(key);
        }
        this.#options.onChange?.();
        return this.#saveCache();
      },
      (error: Error) => {
        this.#errors.set(server, error.message);
        this.#options.onChange?.();
      },
    ).finally(() => this.#listing.delete(server));
    this.#listing.set(server, job);
    return job;
  }

  /**
   * Forgets a server's tools after it announced a change, lists them again, and reports the
   * change.
   *
   * @param server The server whose tools changed.
   */
  async refresh(server: string): Promise<void> {
    await this.#list(server, true);
  }

  /** Every known tool, sorted by full name. */
  entries(): CatalogEntry[] {
    const out: CatalogEntry[] = [];
    for (const [server, tools] of this.#tools) {
      for (const tool of tools) {
        out.push({ ...tool, server, fullName: fullToolName(server, tool.name) });
      }
    }
    return out.sort((a, b) => a.fullName < b.fullName ? -1 : a.fullName > b.fullName ? 1 : 0);
  }

  /** Each configured server with its tool count or error, or whether it is being listed. */
  summary(): ServerSummary[] {
    return this.#pool.names.map((name) => {
      const tools = this.#tools.get(name);
      const error = this.#errors.get(name);
      const loading = !tools && !error && this.#listing.has(name);
      return {
        name,
        ...(tools ? { tools: tools.length } : {}),
        ...(error ? { error } : {}),
        ...(loading ? { loading: true as const } : {}),
      };
    });
  }

  /**
   * Splits a full tool name into its server and tool, against the configured servers.
   *
   * @param fullName `mcp__<server>__<tool>`.
   * @returns The server and tool, or undefined when no configured server matches.
   */
  parse(fullName: string): { server: string; tool: string } | undefined {
    if (!fullName.startsWith("mcp__")) return undefined;
    let best: string | undefined;
    for (const server of this.#pool.names) {
      if (fullName.startsWith(`mcp__${server}__`) && (!best || server.length > best.length)) {
        best = server;
      }
    }
    if (!best) return undefined;
    return { server: best, tool: fullName.slice(`mcp__${best}__`.length) };
  }

  /**
   * Finds a tool by full name, listing its server first if needed.
   *
   * @param fullName `mcp__<server>__<tool>`.
   * @returns The entry.
   * @throws {Error} Saying which part of the name is unknown, with suggestions.
   */
  async lookup(fullName: string): Promise<CatalogEntry> {
    const parsed = this.parse(fullName);
    if (!parsed) {
      const servers = this.#pool.names;
      throw new Error(
        `Unknown tool "${fullName}": names look like mcp__<server>__<tool>, and the servers are ${
          servers.length ? servers.join(", ") : "(none configured)"
        }`,
      );
    }
    await this.#list(parsed.server);
    const tools = this.#tools.get(parsed.server);
    if (!tools) {
      throw new Error(
        this.#errors.get(parsed.server) ?? `Server "${parsed.server}" is unavailable`,
      );
    }
    const tool = tools.find((t) => t.name === parsed.tool);
    if (!tool) {
      const near = tools.filter((t) => normalise(t.name) === normalise(parsed.tool)).map((t) =>
        t.name
      );
      const hint = near.length
        ? `did you mean ${near.map((n) => `"mcp__${parsed.server}__${n}"`).join(", ")}?`
        : `use searchTools() to find tools`;
      throw new Error(
        `Unknown tool "${fullName}": server "${parsed.server}" has no tool "${parsed.tool}"; ${hint}`,
      );
    }
    return { ...tool, server: parsed.server, fullName };
  }

  /**
   * Resolves a typed-proxy access `tools.<server>.<tool>` to a full tool name. Names match
   * verbatim, or by their proxy (camelCase) or normalised form.
   *
   * @param serverKey The property used for the server.
   * @param toolKey The property used for the tool.
   * @returns The full tool name.
   * @throws {Error} When nothing or more than one tool matches.
   */
  async resolveProxy(serverKey: string, toolKey: string): Promise<string> {
    const matchName = (candidates: string[], key: string) => {
      const exact = candidates.filter((c) => c === key);
      if (exact.length) return exact;
      const byProxy = candidates.filter((c) => proxyName(c) === key);
      if (byProxy.length) return byProxy;
      return candidates.filter((c) => normalise(c) === normalise(key));
    };
    const servers = matchName(this.#pool.names, serverKey);
    if (servers.length !== 1) {
      throw new Error(
        servers.length
          ? `Ambiguous server "${serverKey}": matches ${
            servers.join(", ")
          }; use callMCPTool with the full name`
          : `Unknown server "${serverKey}" in tools.${serverKey}: the servers are ${
            this.#pool.names.join(", ") || "(none)"
          }`,
      );
    }
    const server = servers[0];
    await this.#list(server);
    const tools = (this.#tools.get(server) ?? []).map((t) => t.name);
    if (!this.#tools.has(server)) {
      throw new Error(this.#errors.get(server) ?? `Server "${server}" is unavailable`);
    }
    const found = matchName(tools, toolKey);
    if (found.length !== 1) {
      throw new Error(
        found.length
          ? `Ambiguous tool "${toolKey}" on "${server}": matches ${
            found.join(", ")
          }; use callMCPTool with the full name`
          : `Unknown tool tools.${serverKey}.${toolKey}: "${server}" has ${
            tools.map((t) => proxyName(t)).join(", ")
          }`,
      );
    }
    return fullToolName(server, found[0]);
  }

  /**
   * Ranks tools by how well their names and descriptions match a query.
   *
   * @param query Words to look for; empty lists everything.
   * @param options How many results and which server.
   * @returns Matching entries, best first.
   */
  async search(
    query: string,
    options: { limit?: number; server?: string } = {},
  ): Promise<CatalogEntry[]> {
    await this.ensure(options.server ? [options.server] : undefined);
    const terms = searchTerms(query);
    const scored: Array<[number, CatalogEntry]> = [];
    for (const entry of this.entries()) {
      if (options.server && entry.server !== options.server) continue;
      if (terms.length === 0) {
        scored.push([0, entry]);
        continue;
      }
      const score = matchScore(terms, entry);
      if (score > 0) scored.push([score, entry]);
    }
    scored.sort((a, b) => b[0] - a[0] || (a[1].fullName < b[1].fullName ? -1 : 1));
    return scored.slice(0, options.limit ?? 10).map(([, entry]) => entry);
  }

  /**
   * Returns the compiled validator for a tool's input schema (compiled once per schema).
   *
   * @param entry The tool.
   * @returns A function that returns an error message, or undefined when the arguments are valid.
   */
  validator(entry: CatalogEntry): Validate {
    let validate = this.#validators.get(entry.fullName);
    if (validate) return validate;
    const schema = entry.inputSchema ?? { type: "object" };
    const is2020 = typeof schema.$schema === "string" && schema.$schema.includes("2020-12");
    try {
      const ajv = is2020 ? (this.#ajv2020 ??= makeAjv(true)) : (this.#ajv07 ??= makeAjv(false));
      const { $schema: _ignored, ...body } = schema;
      const compiled = ajv.compile(body);
      validate = (args) =>
        compiled(args)
          ? undefined
          : describeValidationErrors(entry.fullName, compiled.errors ?? []);
    } catch (error) {
      this.#options.log.warn(
        `Cannot compile the input schema of ${entry.fullName}; its arguments are passed unchecked: ${
          (error as Error).message
        }`,
      );
      validate = () => undefined;
    }
    this.#validators.set(entry.fullName, validate);
    return validate;
  }
}

/**
 * The default location of the tool cache for a configuration.
 *
 * @param cacheDir The user cache directory of this program.
 * @param configHash The configuration hash.
 * @returns The cache file path.
 */
export function catalogCacheFile(cacheDir: string, configHash: string): string {
  return join(cacheDir, "catalog", `${configHash.slice(0, 16)}.json`);
}
