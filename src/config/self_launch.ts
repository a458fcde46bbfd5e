/**
 * How to start this program again from a client's config or a scheduler: the compiled binary,
 * `deno run -A <checkout>/main.ts`, or, when its modules came from a JSR registry, the command
 * that `deno install -g` made or `deno run -A jsr:@scope/name@version`.
 *
 * @module
 */
import { delimiter, isAbsolute, join } from "node:path";
import { fileURLToPath } from "node:url";
import { homeDir } from "./paths.ts";

/** A command line that starts Code Executor. */
export interface LaunchCommand {
  /** The executable. */
  command: string;
  /** Its arguments. */
  args: string[];
  /** Variables the command needs beyond the caller's environment (`JSR_URL`). */
  env?: Record<string, string>;
}

/** The name the README's `deno install -g -n …` gives the installed command. */
export const INSTALLED_COMMAND = "code-executor";

/** The registry Deno uses when `JSR_URL` is not set. */
export const DEFAULT_JSR_URL = "https://jsr.io/";

// deno.json's "unstable" list does not apply to a program run from a registry: the flags go on
// the command line. Without this one, Deno.serve aborts request.signal after every response.
const UNSTABLE_FLAGS = ["--unstable-no-legacy-abort"];

// Deno 2.9 refuses a JSR or npm version younger than 24 hours (its minimum dependency age), even
// one already in its cache: an entry written on release day would not start until the next day.
// The version is pinned exactly and the user has just run it, so the entry turns the policy off
// (a cutoff time would change the entry on every `setup`, which must be idempotent).
const REGISTRY_FLAGS = ["--min-dep-age=0"];

/** Options of {@linkcode selfLaunchCommand}. */
export interface SelfLaunchOptions {
  /** The URL of this program's `main.ts`; the one this module was loaded with by default. */
  mainUrl?: URL;
  /** Where to look for the installed command (`PATH`, `DENO_INSTALL_ROOT`, `HOME`). */
  env?: Record<string, string>;
  /** The operating system; the current one by default. */
  os?: typeof Deno.build.os;
}

/** A package version in a JSR registry. */
export interface RegistryPackage {
  /** `jsr:@scope/name@version`. */
  specifier: string;
  /** The registry's URL, with a trailing slash: what `JSR_URL` must say to reach it. */
  registry: string;
}

/**
 * Returns the command line that starts this program:
 *
 * - compiled (`deno compile`): the binary itself;
 * - from a checkout: `deno run -A <abs path>/main.ts`;
 * - from a JSR registry: the absolute path of the command `deno install -g -n code-executor`
 *   made for this very version (clients such as Claude Desktop do not have `~/.deno/bin` on
 *   their `PATH`; its lockfile pins the version, so it needs no flag), else
 *   `deno run -A --unstable-no-legacy-abort --min-dep-age=0 jsr:@scope/name@version` (a version
 *   younger than a day starts too); with `env.JSR_URL` when the registry is not jsr.io (Deno
 *   finds it by that variable only);
 * - from another URL: `deno run -A --unstable-no-legacy-abort <url>`.
 *
 * @param subcommand The command to run (`serve`, `sync`).
 * @param options Where this program was loaded from and where to look for the installed command.
 * @returns The executable, its arguments and the variables it needs.
 */
export function selfLaunchCommand(
  subcommand: string,
  options: SelfLaunchOptions = {},
): LaunchCommand {
  const main = options.mainUrl ?? new URL("../../main.ts", import.meta.url);
  if (main.protocol === "file:") {
    const path = fileURLToPath(main);
    // A compiled binary serves its modules from a virtual directory named deno-compile-<name>.
    if (/deno-compile-/.test(path)) return { command: Deno.execPath(), args: [subcommand] };
    return { command: Deno.execPath(), args: ["run", "-A", path, subcommand] };
  }
  const denoRun = (target: string, flags: string[] = []): LaunchCommand => ({
    command: Deno.execPath(),
    args: ["run", "-A", ...UNSTABLE_FLAGS, ...flags, target, subcommand],
  });
  const pkg = registryPackage(main);
  if (!pkg) return denoRun(main.href);
  const installed = findInstalledCommand(
    pkg.specifier,
    options.env ?? Deno.env.toObject(),
    options.os ?? Deno.build.os,
  );
  const launch = installed
    ? { command: installed, args: [subcommand] }
    : denoRun(pkg.specifier, REGISTRY_FLAGS);
  return pkg.registry === DEFAULT_JSR_URL ? launch : { ...launch, env: { JSR_URL: pkg.registry } };
}

/**
 * Names the JSR package version a module URL belongs to. A registry serves the files of
 * `@scope/name@version` under `<registry>/@scope/name/version/`.
 *
 * @param mainUrl The URL of the package's `main.ts`.
 * @returns The package, or undefined when the URL is not laid out as a registry's.
 */
export function registryPackage(mainUrl: URL): RegistryPackage | undefined {
  if (mainUrl.protocol !== "https:" && mainUrl.protocol !== "http:") return undefined;
  if (mainUrl.search || mainUrl.hash) return undefined;
  const match = /^(.*\/)(@[a-z0-9][a-z0-9-]*)\/([a-z0-9][a-z0-9-]*)\/([^/]+)\/main\.ts$/.exec(
    mainUrl.href,
  );
  if (!match) return undefined;
  const [, registry, scope, name, version] = match;
  if (!/^\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.+-]*)?$/.test(version)) return undefined;
  return { specifier: `jsr:${scope}/${name}@${version}`, registry };
}

/**
 * Finds the command `deno install -g -n code-executor jsr:…` made for this package version: a
 * script on `PATH` or in Deno's install directory (`$DENO_INSTALL_ROOT/bin`, `~/.deno/bin`) that
 * names exactly this version, or names the package without a version (`deno install -g … jsr:@s/n`)
 * while the lockfile Deno wrote beside it (`.code-executor/deno.lock`) pins it to this version.
 *
 * @param specifier `jsr:@scope/name@version`.
 * @param env `PATH`, `DENO_INSTALL_ROOT`, `HOME`.
 * @param os The operating system (Windows shims end in `.cmd`).
 * @returns Its absolute path, or undefined.
 */
export function findInstalledCommand(
  specifier: string,
  env: Record<string, string>,
  os: typeof Deno.build.os,
): string | undefined {
  const at = specifier.lastIndexOf("@");
  const pkg = specifier.slice(0, at); // jsr:@scope/name
  const version = specifier.slice(at + 1);
  const dirs = (env.PATH ?? env.Path ?? "").split(os === "windows" ? ";" : delimiter);
  if (env.DENO_INSTALL_ROOT) dirs.push(join(env.DENO_INSTALL_ROOT, "bin"));
  const home = homeDir(env);
  if (home) dirs.push(join(home, ".deno", "bin"));
  const file = os === "windows" ? `${INSTALLED_COMMAND}.cmd` : INSTALLED_COMMAND;
  // The shim quotes the specifier; the look-ahead keeps @0.1.1 from matching @0.1.10.
  const runsIt = new RegExp(`${RegExp.escape(specifier)}(?![0-9A-Za-z.+-])`);
  const runsAnyVersion = new RegExp(`${RegExp.escape(pkg)}(?=['"])`);
  for (const dir of dirs) {
    if (!dir || !isAbsolute(dir)) continue;
    const path = join(dir, file);
    try {
      if (Deno.statSync(path).size > 64 * 1024) continue;
      const text = Deno.readTextFileSync(path);
      if (runsIt.test(text)) return path;
      if (runsAnyVersion.test(text) && lockedVersion(dir, pkg) === version) return path;
    } catch {
      // Not there, or not readable: not the installed command.
    }
  }
  return undefined;
}

/** The version of `pkg` (`jsr:@scope/name`) in the lockfile of the installed command in `dir`. */
function lockedVersion(dir: string, pkg: string): string | undefined {
  try {
    const lock = JSON.parse(
      Deno.readTextFileSync(join(dir, `.${INSTALLED_COMMAND}`, "deno.lock")),
    ) as { specifiers?: Record<string, unknown> };
    // Deno 2.9 writes "jsr:@scope/name@*": "0.1.0" for an install without a version.
    const versions = new Set(
      Object.entries(lock.specifiers ?? {})
        .filter(([key, value]) => key.startsWith(`${pkg}@`) && typeof value === "string")
        .map(([, value]) => value as string),
    );
    return versions.size === 1 ? [...versions][0] : undefined;
  } catch {
    return undefined;
  }
}
