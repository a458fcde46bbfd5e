/**
 * What `setup` shows: the scanned client configs, the plan, and the changes as diffs. Text only;
 * `setup.ts` decides where it goes.
 *
 * @module
 */
import { HTTP_TOKEN_VARIABLE, type ScannedConfig } from "../config/client_configs.ts";
import { unifiedDiff } from "../config/text_diff.ts";
import { plural } from "../_util.ts";
import type { SetupPlan } from "./setup_plan.ts";
import { shellLine } from "./sync.ts";

/** Writes a path for people (`~/…` under the home directory). */
export type ShowPath = (path: string) => string;

/**
 * Lists every scanned config with its path and what it holds, one line each.
 *
 * @param scans The scanned configs, Code Executor's own file included.
 * @param show How to write a path.
 * @returns The lines, under a heading.
 */
export function formatScans(scans: ScannedConfig[], show: ShowPath): string {
  const width = Math.max(...scans.map((s) => s.client.label.length));
  const lines = scans.map((scan) =>
    `  ${scan.client.label.padEnd(width)}  ${show(scan.client.path)}: ${describeScan(scan)}\n`
  );
  return `MCP client configs:\n${lines.join("")}`;
}

/**
 * Describes a plan: the entry, the servers that move, those kept and those that stay, and why.
 *
 * @param plan The plan.
 * @param show How to write a path.
 * @returns The lines, under a heading.
 */
export function formatPlan(plan: SetupPlan, show: ShowPath): string {
  const { entry, target, own } = plan;
  const where = show(target.client.path);
  let out = "\nPlan:\n";
  const how = "url" in entry.target
    ? `${entry.target.url} (Authorization: Bearer \${${HTTP_TOKEN_VARIABLE}})`
    : shellLine([
      ...Object.entries(entry.target.launch.env ?? {}).map(([k, v]) => `${k}=${v}`),
      entry.target.launch.command,
      ...entry.target.launch.args,
    ]);
  if (entry.action === "unchanged") {
    out += `  "${entry.name}" is already in ${where}\n`;
  } else {
    out += `  ${entry.action} "${entry.name}" ${
      entry.action === "add" ? "to" : "in"
    } ${where}: ${how}\n`;
  }
  if (entry.replaces) out += `  remove "${entry.replaces}" from ${where} (replaced by it)\n`;
  for (const server of plan.moving) out += `  move "${server.name}" to ${show(own.client.path)}\n`;
  if (plan.kept.length > 0) {
    out += `  keep ${plan.kept.map((s) => `"${s.name}"`).join(", ")} in ${where} ` +
      `(move them with --move)\n`;
  }
  for (const server of plan.staying) out += `  not moving "${server.name}": ${server.message}\n`;
  return out;
}

/**
 * Shows the plan's file changes as unified diffs (a new file as one from `/dev/null`).
 *
 * @param plan The plan.
 * @param show How to write a path.
 * @returns The diffs, or an empty string when no file changes.
 */
export function formatDiffs(plan: SetupPlan, show: ShowPath): string {
  if (plan.files.length === 0) return "";
  return "\n" + plan.files.map((file) =>
    unifiedDiff(file.before ?? "", file.after, {
      fromName: file.before === undefined ? "/dev/null" : show(file.path),
      toName: show(file.path),
    })
  ).join("");
}

function describeScan(scan: ScannedConfig): string {
  if (!scan.found) return "not found";
  if (scan.error) return `unreadable: ${scan.error}`;
  if (scan.servers.length === 0) return "no servers";
  const names = scan.servers.map((s) =>
    s.state === "usable"
      ? s.missing?.length
        ? `${s.name} (needs ${s.missing.map((v) => `\${${v}}`).join(", ")})`
        : s.name
      : s.state === "self"
      ? `${s.name} (this server)`
      : s.state === "disabled"
      ? `${s.name} (disabled)`
      : `${s.name} (broken)`
  );
  return `${plural(scan.servers.length, "server")}: ${names.join(", ")}`;
}
