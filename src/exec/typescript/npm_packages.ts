/**
 * The npm packages that TypeScript code may import (`sandbox.npmPackages`): fetched once into the
 * TypeScript children's `DENO_DIR` (its `npm/` cache), which the children then read offline
 * (`--cached-only`) and cannot write (no `--allow-write` there); an import map, passed to each
 * child as a `data:` URL, maps the bare names to the exact versions. Before a run, the code's
 * imports are checked against the list, so that a wrong one is refused with what is allowed
 * rather than with Deno's words about flags.
 *
 * @module
 */
import { builtinModules } from "node:module";
import { isAbsolute, join, relative, resolve, sep as SEP } from "node:path";
import { fileURLToPath } from "node:url";
import { CodeExecutorError } from "../../errors.ts";
import type { Logger } from "../../log.ts";
import { type ModuleReference, scanTopLevel } from "./source.ts";

/** One package of `sandbox.npmPackages`. */
export interface NpmPackage {
  /** Its npm name, `csv-parse` or `@scope/name`. */
  name: string;
  /** Its exact version. */
  version: string;
  /** How code imports it with a version: `npm:csv-parse@7.0.3`. */
  specifier: string;
  /** Its package.json `description`, once it is in the cache. */
  description?: string;
}

/** Characters of a package's description kept for the model. */
const MAX_DESCRIPTION_CHARS = 160;

/**
 * Splits `name@version` as the settings hold it (already checked by the schema).
 *
 * @param spec `csv-parse@7.0.3`, `@scope/name@1.0.0`.
 * @returns The package.
 */
export function parsePackageSpec(spec: string): NpmPackage {
  const at = spec.lastIndexOf("@");
  const name = spec.slice(0, at);
  const version = spec.slice(at + 1);
  return { name, version, specifier: `npm:${name}@${version}` };
}

/** An npm specifier split: `npm:name@version/sub/path`, the version and path optional. */
const NPM_SPECIFIER = /^npm:\/?((?:@[^/@]+\/)?[^/@]+)(?:@([^/]*))?(\/.*)?$/;
/** A bare specifier split: `name/sub/path`, `@scope/name/sub/path`. */
const BARE_SPECIFIER = /^((?:@[^/@]+\/)?[^/@:]+)(\/.*)?$/;

/** The admin's packages, the import map that offers them, and the check of a run's imports. */
export class NpmPackages {
  /** The packages, in the settings' order. */
  readonly list: readonly NpmPackage[];
  #byName: Map<string, NpmPackage>;

  /**
   * Takes the setting.
   *
   * @param specs `sandbox.npmPackages`.
   */
  constructor(specs: readonly string[]) {
    this.list = specs.map(parsePackageSpec);
    this.#byName = new Map(this.list.map((pkg) => [pkg.name, pkg]));
  }

  /** Whether any package is offered (children then load npm packages at all). */
  get enabled(): boolean {
    return this.list.length > 0;
  }

  /**
   * The import map the children run with, as a `data:` URL (no file to write, or to keep in a
   * read-only cache): each name, its subpaths and its unversioned `npm:` form go to the exact
   * version.
   *
   * @returns The URL for `--import-map`.
   */
  importMapUrl(): string {
    const imports: Record<string, string> = {};
    for (const { name, specifier } of this.list) {
      imports[name] = specifier;
      imports[`${name}/`] = `npm:/${name}@${specifier.slice(specifier.lastIndexOf("@") + 1)}/`;
      // `npm:name/sub` is not remapped by a prefix key (Deno 2.9); it resolves to the cached
      // version, which is this one unless another package depends on another version.
      imports[`npm:${name}`] = specifier;
    }
    const json = JSON.stringify({ imports });
    return `data:application/json;base64,${btoa(json)}`;
  }

  /** The packages as the tool description names them: `csv-parse@7.0.3, date-fns@4.4.0`. */
  summary(): string {
    return this.list.map((pkg) => `${pkg.name}@${pkg.version}`).join(", ");
  }

  /** What may be imported, for an error message. */
  #allowed(): string {
    const packages = this.list.length
      ? `the npm packages of sandbox.npmPackages: ${
        this.list.map((pkg) => `"${pkg.name}" (or "${pkg.specifier}")`).join(", ")
      }`
      : "no npm packages (sandbox.npmPackages is empty)";
    return `${packages}; Node built-ins ("node:fs"), data: URLs, and files by absolute file: URL under the run's permissions.read`;
  }

  /**
   * Refuses code that imports, by a specifier written in it, a module the children do not offer.
   * Specifiers that code computes at run time are not seen here; the child refuses those itself
   * (`--cached-only`, `--no-remote`, its read permissions).
   *
   * @param code The model's TypeScript (or a skill's body).
   * @param readable The run's read grants (real paths): files under them may be imported.
   * @throws {CodeExecutorError} `ImportNotAllowedError`, naming each refused import, its line and
   *   what is allowed.
   */
  check(code: string, readable: readonly string[] = []): void {
    const refused = scanTopLevel(code).modules.flatMap((module) => {
      const why = this.#refusal(module.specifier, readable);
      return why ? [`line ${lineOf(code, module)}: ${why}`] : [];
    });
    if (refused.length === 0) return;
    throw new CodeExecutorError(
      "ImportNotAllowedError",
      `The code imports what this server does not offer, so it was not run: ${
        refused.slice(0, 5).join("; ")
      }${
        refused.length > 5 ? `; and ${refused.length - 5} more` : ""
      }. Allowed: ${this.#allowed()}. Admin: add a package to sandbox.npmPackages (name@exact-version)`,
    );
  }

  /** Why one specifier is refused, or undefined when it is allowed. */
  #refusal(specifier: string, readable: readonly string[]): string | undefined {
    const shown = JSON.stringify(specifier.slice(0, 200));
    if (/^node:/.test(specifier) || /^data:/.test(specifier)) return undefined;
    if (/^jsr:/.test(specifier)) return `${shown} is a JSR module (JSR is not offered)`;
    if (/^https?:/i.test(specifier)) return `${shown} is a remote module (none is fetched)`;
    if (/^file:/i.test(specifier) || specifier.startsWith("/")) {
      // A file (generated wrappers, a project's module) under a path the run may read; the
      // child's read permission still decides at the import itself.
      const path = filePath(specifier);
      if (path !== undefined && readable.some((dir) => isWithin(path, dir))) return undefined;
      return `${shown} is a file outside the paths this run may read: it needs read access, which a run gets with permissions: {read: ["<its directory>"]} (within ALLOWED_PROJECTS)`;
    }
    if (/^\.{0,2}\//.test(specifier) || /^\.\.?$/.test(specifier)) {
      return `${shown} is a relative path, and the code has no directory to be relative to: import a file by its absolute file: URL, under a path the run may read (permissions.read)`;
    }
    const npm = NPM_SPECIFIER.exec(specifier);
    if (npm) {
      const pkg = this.#byName.get(npm[1]);
      if (!pkg) return `${shown} is not one of the npm packages offered`;
      if (npm[2] !== undefined && npm[2] !== pkg.version) {
        return `${shown} asks for another version than ${pkg.specifier}: leave the version out or write ${pkg.version}`;
      }
      return undefined;
    }
    const bare = BARE_SPECIFIER.exec(specifier);
    if (bare && this.#byName.has(bare[1])) return undefined;
    return `${shown} is not one of the npm packages offered${
      bare && builtinModules.includes(bare[1]) ? ` (the Node built-in is "node:${bare[1]}")` : ""
    }`;
  }

  /**
   * Makes sure every package is in the children's npm cache: `deno cache` with the host's own
   * environment (registry settings, proxies), which fetches only what is missing; with
   * everything there it touches no network and writes nothing, so it also passes on a
   * read-only cache prepared in advance. Then reads each package's description.
   *
   * @param options The `deno` to run and the children's `DENO_DIR`.
   * @returns How long it took, in ms.
   * @throws {Error} When a package cannot be fetched, naming the setting and what to do.
   */
  async ensureCached(
    options: { denoPath: string; denoDir: string; log: Logger },
  ): Promise<number> {
    if (!this.enabled) return 0;
    const started = performance.now();
    const output = await new Deno.Command(options.denoPath, {
      args: [
        "cache",
        "--quiet",
        "--no-config",
        "--no-lock",
        "--node-modules-dir=none",
        ...this.list.map((pkg) => pkg.specifier),
      ],
      env: { DENO_DIR: options.denoDir, NO_COLOR: "1", DENO_NO_UPDATE_CHECK: "1" },
      stdin: "null",
      stdout: "null",
      stderr: "piped",
    }).output();
    if (!output.success) {
      const stderr = new TextDecoder().decode(output.stderr).trim();
      const last = stderr.split("\n").filter((line) =>
        /\S/.test(line) && !/^\s+\d+: <unknown>|^Stack backtrace/.test(line)
      ).slice(0, 3).join(" ");
      throw new Error(
        `Cannot fetch sandbox.npmPackages (${this.summary()}) into ${options.denoDir}: ${
          last || `deno cache exited with code ${output.code}`
        }. Check each name@version on the npm registry and that the registry is reachable (NPM_CONFIG_REGISTRY), or run code-executor prepare where it is; a read-only cache must be prepared with the same packages`,
      );
    }
    for (const pkg of this.list) pkg.description = await readDescription(options.denoDir, pkg);
    const ms = Math.round(performance.now() - started);
    options.log.debug(`npm packages ready in ${ms} ms: ${this.summary()}`);
    return ms;
  }
}

/** The absolute path a `file:` URL or an absolute path names, `..` resolved; undefined if malformed. */
function filePath(specifier: string): string | undefined {
  try {
    const path = specifier.startsWith("/") ? specifier : fileURLToPath(specifier);
    const resolved = resolve(path);
    try {
      // A symlink is judged by where it leads; Deno's own check at the import still decides.
      return Deno.realPathSync(resolved);
    } catch {
      return resolved;
    }
  } catch {
    return undefined;
  }
}

/** Whether `path` is `dir` or inside it. */
function isWithin(path: string, dir: string): boolean {
  const rel = relative(dir, path);
  return rel === "" || (rel !== ".." && !rel.startsWith(`..${SEP}`) && !isAbsolute(rel));
}

/** The line (1-based) of a module reference. */
function lineOf(code: string, module: ModuleReference): number {
  let line = 1;
  for (let i = code.indexOf("\n"); i >= 0 && i < module.at; i = code.indexOf("\n", i + 1)) line++;
  return line;
}

/** A package's own description, from its package.json in Deno's npm cache, cut short. */
async function readDescription(denoDir: string, pkg: NpmPackage): Promise<string | undefined> {
  const path = join(denoDir, "npm", "registry.npmjs.org", pkg.name, pkg.version, "package.json");
  try {
    const description = JSON.parse(await Deno.readTextFile(path)).description;
    if (typeof description !== "string") return undefined;
    const line = description.replace(/\s+/g, " ").trim();
    return line.length > MAX_DESCRIPTION_CHARS
      ? `${line.slice(0, MAX_DESCRIPTION_CHARS - 1)}…`
      : line || undefined;
  } catch {
    // Another registry's cache lives elsewhere; the description is only a help.
    return undefined;
  }
}
