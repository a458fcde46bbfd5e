/**
 * `doctor`: what is configured, what connects, what it costs in tokens, and whether
 * `serve --http` could start with the HTTP settings.
 *
 * @module
 */
import { loadSettings } from "../config/settings.ts";
import { discoverUpstreams } from "../config/upstream.ts";
import { Executor } from "../exec/executor.ts";
import { createLogger } from "../log.ts";
import { listOwnTools } from "../server/introspect.ts";
import { plural } from "../_util.ts";
import { openHub } from "../upstream/hub.ts";
import { httpReport } from "./doctor_http.ts";

/** Options of {@linkcode doctor}. */
export interface DoctorOptions {
  /** Upstream config files given with `--config`. */
  configPaths: string[];
  /** Write text here instead of stdout (tests). */
  write?: (text: string) => void;
}

function indent(text: string, spaces: number): string {
  return text.replace(/^/gm, " ".repeat(spaces));
}

/** Columns the report keeps within: a terminal's 100, so that nothing wraps into a mess. */
const WIDTH = 100;

/** Cuts the middle out of a cell (a long path keeps its start and its file name). */
function elide(cell: string, width: number): string {
  if (cell.length <= width) return cell;
  const tail = Math.floor((width - 1) / 2);
  return `${cell.slice(0, width - 1 - tail)}…${cell.slice(cell.length - tail)}`;
}

/**
 * Lays rows out in columns, indented by two, within {@linkcode WIDTH}: the widest of the columns
 * `shrinkable` names give up room first (their cells elided in the middle), down to 8 each.
 */
function table(rows: string[][], shrinkable: number[]): string {
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => (r[i] ?? "").length)));
  const total = () => 2 + widths.reduce((sum, w) => sum + w, 0) + 2 * (widths.length - 1);
  while (total() > WIDTH) {
    const widest = shrinkable.filter((i) => widths[i] > 8).sort((a, b) => widths[b] - widths[a])[0];
    if (widest === undefined) break;
    widths[widest] -= Math.min(total() - WIDTH, widths[widest] - 8);
  }
  return rows.map((r) =>
    "  " + r.map((cell, i) => elide(cell, widths[i]).padEnd(widths[i])).join("  ").trimEnd()
  ).join("\n");
}

/** Wraps `name: text` at {@linkcode WIDTH}, words whole (a path stays copyable), indented. */
function note(name: string, text: string): string {
  const lines: string[] = [];
  let line = `  ${name}:`;
  let words = 0;
  for (const word of text.split(/\s+/).filter(Boolean)) {
    // A line's first word joins it whatever its length: a path wider than a line stands alone.
    if (words > 0 && line.length + 1 + word.length > WIDTH) {
      lines.push(line);
      line = "   ";
      words = 0;
    }
    line += ` ${word}`;
    words++;
  }
  lines.push(line);
  return lines.join("\n");
}

/**
 * Connects to every configured server and prints a report, then the HTTP settings and whether
 * their port is free.
 *
 * @param options Config files and output.
 * @returns The exit code: 0 when every server works, 1 otherwise. Problems of the HTTP settings
 *   are shown but do not count: stdio is the default, and the port is often held by a running
 *   `serve --http`.
 */
export async function doctor(options: DoctorOptions): Promise<number> {
  const encoder = new TextEncoder();
  const write = options.write ?? ((text: string) => Deno.stdout.writeSync(encoder.encode(text)));
  const log = createLogger("error");
  const { settings, sources: settingsSources } = await loadSettings();
  const upstream = await discoverUpstreams({ configPaths: options.configPaths });
  write(`Settings: ${settingsSources.length ? settingsSources.join(", ") : "defaults"}\n\n`);
  write("Config sources:\n");
  for (const source of upstream.sources) {
    const state = source.error ? "skipped" : source.found ? "found  " : "missing";
    const detail = source.error
      ? `: none of its servers is used until it is fixed\n${indent(source.error, 4)}`
      : source.found
      ? ` (${plural(source.servers, "server")})`
      : "";
    write(`  ${state} ${source.path} [${source.kind}]${detail}\n`);
  }
  const skippedFiles = upstream.sources.filter((source) => source.error).length;

  const hub = await openHub(upstream, settings, { log });
  try {
    const rows = [["SERVER", "SOURCE", "TRANSPORT", "STATUS", "TOOLS", "CONNECT"]];
    let upstreamTokens = 0;
    let failures = upstream.broken.length + skippedFiles;
    const { countTokens } = await import("gpt-tokenizer/encoding/o200k_base");
    await Promise.all(upstream.servers.map((server) =>
      hub.pool.listToolsRaw(server.name).then(
        (raw) => upstreamTokens += countTokens(JSON.stringify(raw)),
        () => {
          // An entry that is Code Executor itself is skipped, as by its command: not a failure.
          const status = hub.pool.statuses().find((s) => s.name === server.name);
          if (!status?.error?.startsWith("skipped:")) failures++;
        },
      )
    ));
    await hub.catalog.ensure();
    const summary = new Map(hub.catalog.summary().map((s) => [s.name, s]));
    // An error is a sentence with a path in it: it goes under the table, whole.
    const problems: string[] = [];
    for (const status of hub.pool.statuses()) {
      const config = hub.pool.config(status.name)!;
      const tools = summary.get(status.name)?.tools;
      const ok = status.state === "ready";
      const [error, ...more] = (status.error ?? summary.get(status.name)?.error ?? "").split("\n");
      if (!ok) {
        // A server's own words (its stderr as it died) follow the sentence, as it wrote them.
        problems.push(
          note(status.name, error) + (more.length ? `\n${indent(more.join("\n"), 4)}` : ""),
        );
      }
      rows.push([
        status.name,
        config.source,
        config.transport,
        ok ? "ok" : error.startsWith("skipped:") ? "skipped" : "error",
        tools === undefined ? "-" : String(tools),
        status.connectMs === undefined ? "-" : `${status.connectMs} ms`,
      ]);
    }
    for (const broken of upstream.broken) {
      problems.push(note(broken.name, broken.error));
      rows.push([broken.name, broken.source, "-", "error", "-", "-"]);
    }
    for (const skipped of upstream.skipped ?? []) {
      if (skipped.reason !== "self" || skipped.name.toLowerCase() === "code-executor") continue;
      problems.push(note(skipped.name, `skipped: ${skipped.detail}`));
      rows.push([skipped.name, skipped.source, "-", "skipped", "-", "-"]);
    }
    const none = skippedFiles > 0
      ? "  (none usable: see the skipped config files above)"
      : "  (none configured)";
    const servers = rows.length > 1 ? table(rows, [1, 0]) : none;
    write(
      `\nServers:\n${servers}\n${problems.length ? `\nDetails:\n${problems.join("\n")}\n` : ""}`,
    );

    const executor = await Executor.create({
      ...settings,
      sandbox: { ...settings.sandbox, warmPool: 0 },
    }, {
      log,
      hub,
    });
    try {
      const own = countTokens(JSON.stringify(await listOwnTools({ executor, hub })));
      const ratio = Math.round((1 - own / Math.max(1, upstreamTokens)) * 100);
      const saved = upstreamTokens === 0
        ? ""
        : ratio >= 0
        ? ` (${ratio}% saved)`
        : " (ours is larger)";
      write(
        `\nTokens (o200k): our tools/list ${own}; the upstream tools/lists ${upstreamTokens}${saved}\n`,
      );
    } finally {
      await executor.close();
    }
    write(`\n${(await httpReport(settings, Deno.env.toObject())).text}`);
    return failures > 0 ? 1 : 0;
  } finally {
    await hub.close();
  }
}
