/**
 * What a run was denied, in words the model can act on. Deno refuses what a sandbox was not
 * granted with `NotCapable: Requires net access to "example.com:443", run again with the
 * --allow-net flag`, which names a flag the model cannot pass. Python code meets the same refusal
 * wrapped by Pyodide when a wheel or code that reached JavaScript fetches or reads a file:
 * `pyodide.http._exceptions.AbortError: Requires …` through `pyodide.http.pyfetch`,
 * `pyodide.ffi.JsException: NotCapable: Requires …` through any other JavaScript call. (Python's
 * own `open()` sees Pyodide's in-memory file system, and its sockets fail inside Emscripten with
 * `OSError: [Errno 23] Host is unreachable`: neither reaches Deno.)
 *
 * Both become a `PermissionError` that names the argument to pass (`permissions: {net: [...]}`,
 * `read`, `write`, of `run_typescript`) when the admin allows it, or the setting that caps it
 * (`permissions.net`, `ALLOWED_PROJECTS`) when no run may have it: one condition, one error type
 * in both languages, a key of `ERROR_TYPES` rather than Deno's class name.
 *
 * @module
 */
import { dirname } from "node:path";
import type { Settings } from "../config/settings.ts";
import { CodeExecutorError, type ExecutionErrorInfo } from "../errors.ts";
import { narrowPermissions, type RequestedPermissions } from "./permissions.ts";

/** What {@linkcode explainDenied} needs to know about the run. */
export interface DeniedContext {
  /** The run's language: Python runs take no `permissions` at all. */
  language: "typescript" | "python";
  /** The run's `permissions` argument. */
  requested?: RequestedPermissions;
  /** The admin's settings, the ceiling of every grant. */
  settings: Settings;
}

/** Deno's refusal: the kind of access and what it was for. */
const REFUSAL = /^Requires (\w+) access(?: to "(.*)")?, run again with the --allow-\w+ flag$/s;

/** Kinds of access no argument grants, and what code can do instead. */
const NEVER_GRANTED: Record<string, string> = {
  env:
    "sandbox code gets no environment variables, and no argument grants them; put the value in the code, or get it through an MCP tool",
  run:
    "sandbox code cannot start processes, and no argument grants it; call an MCP tool that does the job",
  sys: "sandbox code cannot read the host's system information, and no argument grants it",
  ffi: "sandbox code cannot load native libraries, and no argument grants it",
  import:
    "sandbox code imports no remote modules, and no argument grants it; fetch data with fetch() (permissions.net) or through an MCP tool",
};

/**
 * Rewrites a Deno permission refusal the code did not catch into a `PermissionError` that says
 * which argument or setting grants the access.
 *
 * @param error The run's error.
 * @param context The run's language and permissions, and the admin's settings.
 * @returns The rewritten error, or undefined when `error` is not such a refusal.
 *
 * @example
 * ```ts
 * const settings = resolveSettings({ permissions: { net: ["example.com"] } });
 * const error = new CodeExecutorError(
 *   "NotCapable",
 *   'Requires net access to "example.com:443", run again with the --allow-net flag',
 * ).toInfo();
 * (await explainDenied(error, { language: "typescript", settings }))?.message;
 * // 'Requires net access to "example.com:443": … pass permissions: {net: ["example.com:443"]} …'
 * ```
 */
export async function explainDenied(
  error: ExecutionErrorInfo,
  context: DeniedContext,
): Promise<ExecutionErrorInfo | undefined> {
  // Deno's words are the mark, whatever class carries them: Pyodide wraps them in a JsException
  // (with the class name in front) or, through pyfetch, in its own AbortError.
  const denied = error.message.replace(/^NotCapable: /, "");
  const match = REFUSAL.exec(denied);
  let message: string;
  if (match) {
    const [, kind, target] = match;
    const what = target === undefined ? "" : ` to "${target}"`;
    message = `Requires ${kind} access${what}${await explain(kind, target, context)}`;
  } else if (error.type === "NotCapable" || denied !== error.message) {
    // Deno's other refusals (Deno.symlink() wants unscoped read and write) name flags too.
    message = `${denied}; the sandbox never grants that, and no argument changes it`;
  } else {
    return undefined;
  }
  const out: ExecutionErrorInfo = new CodeExecutorError("PermissionError", message).toInfo();
  if (error.traceback !== undefined) {
    // The first line names the class as the type does: PermissionError, not Deno's NotCapable.
    out.traceback = error.traceback.replace(error.message, message).replace(
      /^NotCapable: /,
      "PermissionError: ",
    );
  }
  return out;
}

async function explain(
  kind: string,
  target: string | undefined,
  context: DeniedContext,
): Promise<string> {
  if (kind !== "net" && kind !== "read" && kind !== "write") {
    return `: ${NEVER_GRANTED[kind] ?? `the sandbox grants no ${kind} access`}`;
  }
  if (target === undefined) {
    return `: this needs ${kind} access to everything, which no run may be granted (permissions.${kind} names hosts or paths)`;
  }
  const grant = await grantable(kind, target, context.settings);
  const wanted = [...new Set([...(context.requested?.[kind] ?? []), grant.entry])];
  const argument = `permissions: {${kind}: ${JSON.stringify(wanted).replaceAll('","', '", "')}}`;
  const ceiling = kind === "net" ? "permissions.net" : "ALLOWED_PROJECTS";
  if (context.language === "python") {
    const what = kind === "net" ? "network access" : `${kind} access to the host's files`;
    return grant.refusal === undefined
      ? `: Python code gets no ${what} (run_python takes no permissions); do this part in run_typescript with ${argument} (the admin allows it: ${ceiling}), or through an MCP tool`
      : `: Python code gets no ${what} (run_python takes no permissions), and no run_typescript may have it either: ${grant.refusal}; get it through an MCP tool`;
  }
  return grant.refusal === undefined
    ? `: this run was not granted it; pass ${argument} to run_typescript (the admin allows it: ${ceiling})`
    : `, which no run may be granted: ${grant.refusal}; get it through an MCP tool instead`;
}

/**
 * Whether the admin would grant the access: the entry to ask for (a file that does not exist yet
 * is written through its directory), or the reason the admin's settings refuse it.
 */
async function grantable(
  kind: "net" | "read" | "write",
  target: string,
  settings: Settings,
): Promise<{ entry: string; refusal?: string }> {
  const candidates = kind === "write" ? [target, dirname(target)] : [target];
  let refusal = "";
  for (const entry of candidates) {
    try {
      await narrowPermissions({ [kind]: [entry] }, settings);
      return { entry };
    } catch (error) {
      // The refusal names the entry first (`Cannot grant read access to "/x": …`): keep the why.
      refusal = (error as Error).message.replace(/^Cannot grant [\w ]+ access to "[^"]*": /, "");
      if (!/the path does not exist/.test(refusal)) break;
    }
  }
  return { entry: target, refusal };
}
