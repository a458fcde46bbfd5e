/**
 * Narrowing a caller's `permissions` request to what the admin allows. The admin's settings
 * are the ceiling; a request can only pick from them.
 *
 * @module
 */
import { isAbsolute, relative, sep } from "node:path";
import type { Settings } from "../config/settings.ts";
import { ExecutionRefusedError } from "../exec/result.ts";

/** What a caller asks to grant to sandbox code. */
export interface RequestedPermissions {
  /** Hosts, as `host` or `host:port`. */
  net?: string[];
  /** Absolute paths to read. */
  read?: string[];
  /** Absolute paths to write. */
  write?: string[];
}

/** What the sandbox will get, in the form of Deno `--allow-*` lists. */
export interface GrantedPermissions {
  /** Hosts for `--allow-net`. */
  net: string[];
  /** Real paths for `--allow-read`. */
  read: string[];
  /** Real paths for `--allow-write`. */
  write: string[];
}

const HOST =
  /^(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*|\[[0-9a-f:.]+\])(?::(\d{1,5}))?$/;

function refuse(message: string): never {
  throw new ExecutionRefusedError("PermissionError", message);
}

function splitHost(entry: string): { host: string; port?: string } {
  const match = HOST.exec(entry);
  if (!match) refuse(`Cannot grant network access to "${entry}": expected host or host:port`);
  const port = match[1];
  return { host: port ? entry.slice(0, -(port.length + 1)) : entry, port };
}

function narrowNet(requested: string[], allowed: string[]): string[] {
  const ceiling = allowed.map((entry) => splitHost(entry.toLowerCase()));
  return requested.map((raw) => {
    const entry = raw.trim().toLowerCase();
    const { host, port } = splitHost(entry);
    const ok = ceiling.some((c) => c.host === host && (c.port === undefined || c.port === port));
    if (!ok) {
      const hint = allowed.length
        ? `the admin allows ${allowed.join(", ")}`
        : "the admin allows no hosts; the admin adds them to permissions.net (or CODE_EXECUTOR_ALLOWED_HOSTS)";
      refuse(`Cannot grant network access to "${raw}": ${hint}`);
    }
    return entry;
  });
}

function isWithin(child: string, parent: string): boolean {
  const rel = relative(parent, child);
  return rel === "" || (!rel.startsWith("..") && !isAbsolute(rel) && !rel.startsWith(`..${sep}`));
}

async function realProjects(settings: Settings): Promise<string[]> {
  const out: string[] = [];
  for (const project of settings.allowedProjects) {
    try {
      out.push(await Deno.realPath(project));
    } catch {
      // A project directory that does not exist grants nothing.
    }
  }
  return out;
}

async function narrowPaths(
  kind: "read" | "write",
  requested: string[],
  projects: string[],
): Promise<string[]> {
  const granted: string[] = [];
  for (const raw of requested) {
    if (!isAbsolute(raw)) refuse(`Cannot grant ${kind} access to "${raw}": use an absolute path`);
    if (raw.includes(",")) {
      refuse(`Cannot grant ${kind} access to "${raw}": commas are not allowed in paths`);
    }
    if (projects.length === 0) {
      refuse(
        `Cannot grant ${kind} access to "${raw}": no project directories are allowed; the admin sets ALLOWED_PROJECTS (or allowedProjects in the settings file)`,
      );
    }
    let real: string;
    try {
      real = await Deno.realPath(raw);
    } catch {
      refuse(`Cannot grant ${kind} access to "${raw}": the path does not exist`);
    }
    if (!projects.some((project) => isWithin(real, project))) {
      refuse(
        `Cannot grant ${kind} access to "${raw}": it is not under ALLOWED_PROJECTS (${
          projects.join(", ")
        })`,
      );
    }
    granted.push(real);
  }
  return granted;
}

/**
 * Checks a caller's permission request against the admin's settings.
 *
 * @param requested The `permissions` argument of a run.
 * @param settings The admin's settings.
 * @returns The permissions to grant, with real paths.
 * @throws {ExecutionRefusedError} Naming the entry that was refused and the setting that governs it.
 */
export async function narrowPermissions(
  requested: RequestedPermissions | undefined,
  settings: Settings,
): Promise<GrantedPermissions> {
  const net = narrowNet(requested?.net ?? [], settings.permissions.net);
  const wantsPaths = (requested?.read?.length ?? 0) + (requested?.write?.length ?? 0) > 0;
  const projects = wantsPaths ? await realProjects(settings) : [];
  return {
    net,
    read: await narrowPaths("read", requested?.read ?? [], projects),
    write: await narrowPaths("write", requested?.write ?? [], projects),
  };
}

/**
 * Whether a grant adds nothing to the default profile (so a warm child can serve it).
 *
 * @param granted The narrowed permissions.
 * @returns True when nothing beyond the private workspace is granted.
 */
export function isDefaultProfile(granted: GrantedPermissions): boolean {
  return granted.net.length === 0 && granted.read.length === 0 && granted.write.length === 0;
}
