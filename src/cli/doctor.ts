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

function table(rows: string[][]): string {
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => (r[i] ?? "").length)));
  return rows.map((r) => r.map((cell, i) => cell.padEnd(widths[i])).join("  ").trimEnd()).join(
    "\n",
  );
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
      ? ` (${source.servers} servers)`
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
        () => failures++,
      )
    ));
    await hub.catalog.ensure();
    const summary = new Map(hub.catalog.summary().map((s) => [s.name, s]));
    // A server's own words (its stderr as it died) go under the table, which keeps one line a row.
    const details: string[] = [];
    for (const status of hub.pool.statuses()) {
      const config = hub.pool.config(status.name)!;
      const tools = summary.get(status.name)?.tools;
      const [error, ...more] = (status.error ?? summary.get(status.name)?.error ?? "").split("\n");
      if (status.state !== "ready" && more.length > 0) {
        details.push(`  ${status.name}:\n${indent(more.join("\n"), 2)}`);
      }
      rows.push([
        status.name,
        config.source,
        config.transport,
        status.state === "ready" ? "ok" : error.startsWith("skipped:") ? error : `error: ${error}`,
        tools === undefined ? "-" : String(tools),
        status.connectMs === undefined ? "-" : `${status.connectMs} ms`,
      ]);
    }
    for (const broken of upstream.broken) {
      rows.push([broken.name, broken.source, "-", `error: ${broken.error}`, "-", "-"]);
    }
    for (const skipped of upstream.skipped ?? []) {
      if (skipped.reason !== "self" || skipped.name.toLowerCase() === "code-executor") continue;
      rows.push([skipped.name, skipped.source, "-", `skipped: ${skipped.detail}`, "-", "-"]);
    }
    const none = skippedFiles > 0
      ? "  (none usable: see the skipped config files above)"
      : "  (none configured)";
    write(`\nServers:\n${rows.length > 1 ? table(rows).replace(/^/gm, "  ") : none}\n`);
    if (details.length > 0) write(`\n${details.join("\n")}\n`);

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
