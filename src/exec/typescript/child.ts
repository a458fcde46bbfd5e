/**
 * One TypeScript sandbox: a `deno run` child with deny-by-default permissions, a private
 * workspace as its cwd, and frames over its stdin and stdout.
 *
 * @module
 */
import { Buffer } from "node:buffer";
import type { Logger } from "../../log.ts";
import { type ErrorType, errorTypeOf, type ExecutionErrorInfo } from "../../errors.ts";
import type { ExecutionResult } from "../result.ts";
import type { RunLimits } from "../child/execution.ts";
import { SandboxProcess } from "../child/process.ts";
import type { NpmPackage } from "./npm_packages.ts";
import type { WrappedSource } from "./source.ts";

/** The npm packages a child offers its code (`sandbox.npmPackages`). */
export interface TsChildPackages {
  /** The import map, a `data:` URL (`NpmPackages.importMapUrl`). */
  importMapUrl: string;
  /** What `packages()` returns in the sandbox. */
  list: readonly NpmPackage[];
}

/** What a child may do beyond its own workspace, and where it lives. */
export interface TsChildOptions {
  /** The `deno` executable. */
  denoPath: string;
  /** Path of `sandbox/ts_runner.ts` on disk. */
  runnerPath: string;
  /** Directory under which the child's private directory is created. */
  tempRoot: string;
  /** Deno's cache directory for children (see `sealChildDenoDir`). */
  denoDir: string;
  /** Load the module loader before the code arrives (for children that wait in the pool). */
  preload?: boolean;
  /** npm packages to offer, read from `denoDir`'s npm cache; none when unset. */
  packages?: TsChildPackages;
  /** V8 heap limit and RSS watchdog limit, in MB. */
  memoryMb: number;
  /** Hosts for `--allow-net`; empty for none. */
  net?: string[];
  /** Extra paths for `--allow-read`, already checked against `ALLOWED_PROJECTS`. */
  read?: string[];
  /** Extra paths for `--allow-write`, already checked against `ALLOWED_PROJECTS`. */
  write?: string[];
  /** Paths for `--deny-read` and `--deny-write`: entries under `read` that lead out of it. */
  deny?: string[];
  /** Where to report problems. */
  log: Logger;
}

const DATA_URL_POSITION = /data:application\/typescript;base64,[A-Za-z0-9+/=.]*:(\d+):(\d+)/g;
/** A skill's body run in the caller's child: the runner names it and its line offset in the URL. */
const SKILL_URL_POSITION =
  /data:application\/typescript;skill=([a-z0-9-]+@\d+);offset=(\d+);base64,[A-Za-z0-9+/=.]*:(\d+):(\d+)/g;

/**
 * Rewrites a stack trace or error message from the child so that it names `code.ts` with the
 * model's own line numbers, and drops the runner's frames.
 *
 * @param text Text from the child.
 * @param lineOffset Lines the wrapper added above the model's code.
 * @returns The cleaned text.
 */
export function cleanTrace(text: string, lineOffset: number): string {
  const line = (n: string) => Math.max(1, Number(n) - lineOffset);
  return text
    .replace(
      SKILL_URL_POSITION,
      (_m, ref, offset, n, col) =>
        `skill:${ref}.ts:${Math.max(1, Number(n) - Number(offset))}:${col}`,
    )
    .replace(DATA_URL_POSITION, (_m, n, col) => `code.ts:${line(n)}:${col}`)
    .replace(/data:application\/typescript;base64,[A-Za-z0-9+/=.]*/g, "code.ts")
    .split("\n")
    .filter((text) => !/ts_runner\.ts|\bext:/.test(text))
    // The parser's code frame ("2 | const x =") numbers the wrapped module's lines.
    .map((text) => text.replace(/^(\s*)(\d+)( \| )/, (_m, pad, n, bar) => `${pad}${line(n)}${bar}`))
    .join("\n");
}

/**
 * Cleans an error from the child: model line numbers, and the real name of a parse error,
 * which the module loader reports as a TypeError.
 *
 * @param error The error as reported.
 * @param lineOffset Lines the wrapper added above the model's code.
 * @returns The error to report.
 */
export function cleanError(error: ExecutionErrorInfo, lineOffset: number): ExecutionErrorInfo {
  const parse = /^SyntaxError: ([\s\S]*)$/.exec(error.message);
  // `satisfies`: a misspelt name fails the type check, which a comparison alone would not.
  const out: ExecutionErrorInfo = error.type === ("TypeError" satisfies ErrorType) && parse
    ? { type: errorTypeOf("SyntaxError"), message: cleanTrace(parse[1], lineOffset) }
    : { type: error.type, message: cleanTrace(error.message, lineOffset) };
  if (error.traceback) {
    out.traceback = cleanTrace(error.traceback, lineOffset).replace(
      /^TypeError: SyntaxError:/,
      "SyntaxError:",
    );
  }
  return out;
}

/**
 * A TypeScript sandbox child, used for one execution and then disposed.
 *
 * @example
 * ```ts
 * const child = await TsChild.spawn(options);
 * try {
 *   const result = await child.run(wrapTypescript("return 1 + 1"), limits);
 * } finally {
 *   await child.dispose();
 * }
 * ```
 */
export class TsChild {
  #process: SandboxProcess;
  #ready: Promise<boolean>;
  #used = false;

  private constructor(process: SandboxProcess, preload: boolean, packages?: TsChildPackages) {
    this.#process = process;
    this.#ready = process.next().then((frame) => frame?.t === "ready", () => false);
    const init: Record<string, unknown> = { t: "init", nonce: process.nonce, preload };
    if (packages?.list.length) {
      init.packages = packages.list.map(({ name, version, specifier, description }) => ({
        name,
        version,
        specifier,
        ...(description ? { description } : {}),
      }));
    }
    process.send(init).catch(() => {});
  }

  /**
   * Starts a child. It loads the runner and waits for code.
   *
   * @param opts Permissions and locations.
   * @returns The started child.
   * @throws {Deno.errors.NotFound} When the `deno` executable cannot be found.
   */
  static async spawn(opts: TsChildOptions): Promise<TsChild> {
    const process = await SandboxProcess.start({
      ...opts,
      // A pooled child transpiles the code without writing it to Deno's emit cache: that saves
      // 0.5-1 ms of a warm run and keeps the code off the disk. It then transpiles the runner on
      // every start too (~5 ms, while it waits in the pool), so a cold child keeps the cache.
      env: opts.preload ? { DENO_EMIT_CACHE_MODE: "disable" } : undefined,
      npm: opts.packages !== undefined,
      args: ({ workspace }) => {
        const args = [
          "--no-code-cache",
          `--allow-read=${[workspace, ...(opts.read ?? [])].join(",")}`,
          `--allow-write=${[workspace, ...(opts.write ?? [])].join(",")}`,
          `--v8-flags=--max-old-space-size=${opts.memoryMb}`,
        ];
        // The packages' code is read by the module loader, which needs no read permission for
        // Deno's npm cache: the code itself gets none there.
        if (opts.packages) args.push(`--import-map=${opts.packages.importMapUrl}`);
        if (opts.net && opts.net.length > 0) args.push(`--allow-net=${opts.net.join(",")}`);
        if (opts.deny && opts.deny.length > 0) {
          const deny = opts.deny.join(",");
          args.push(`--deny-read=${deny}`, `--deny-write=${deny}`);
        }
        args.push(opts.runnerPath);
        return args;
      },
    });
    return new TsChild(process, opts.preload === true, opts.packages);
  }

  /** The child's process id. */
  get pid(): number {
    return this.#process.pid;
  }

  /** Resolves true once the runner has loaded, false if it died first. */
  get ready(): Promise<boolean> {
    return this.#ready;
  }

  /** Whether the child process has exited. */
  get exited(): boolean {
    return this.#process.exited;
  }

  /**
   * Runs wrapped code once. A child runs at most one execution.
   *
   * @param wrapped Output of `wrapTypescript`.
   * @param limits Time, output, requests and cancellation; `args`: a skill's arguments, the
   * first argument of the wrapped function (a skill run as a nested run).
   * @returns The result; limits and crashes are reported in it, never thrown.
   * @throws {Error} When the child has already run code.
   */
  async run(
    wrapped: WrappedSource,
    limits: RunLimits & { args?: Record<string, unknown> },
  ): Promise<ExecutionResult> {
    if (this.#used) throw new Error("Cannot run code in a sandbox child twice: it is single-use");
    this.#used = true;
    // A pooled child is ready; a child spawned for this run gets the code right behind `init`,
    // so that it runs it as soon as it has started instead of after a round trip. (A child that
    // dies first is reported by execute(), which reads the frames after `ready`.)
    const base64 = Buffer.from(wrapped.source, "utf8").toString("base64");
    const { args, ...rest } = limits;
    return await this.#process.execute({ t: "exec", base64, args }, {
      ...rest,
      printHint: "console.log",
      stderrMark: true,
      cleanError: (error) => cleanError(error, wrapped.lineOffset),
      cleanStderr: (text) => cleanTrace(text, wrapped.lineOffset),
    });
  }

  /** Kills the child if it is still running and removes its private directory. */
  dispose(): Promise<void> {
    return this.#process.dispose();
  }
}
