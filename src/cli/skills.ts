/**
 * `skills`: the admin's view of the saved skills.
 *
 * - `list`: the latest version of every skill (`--principal` for an HTTP principal's view);
 * - `show NAME[@N]`: one version: its front matter, schema and program;
 * - `rm NAME`: a skill and all its versions;
 * - `export NAME[@N] DIR`: one version's `SKILL.md` and program into `DIR/<name>/`;
 * - `import DIR`: a skill directory (as `export` writes it), validated exactly as a save from code
 *   is: name, sizes, schema, the strict front matter, no symlink, no other file.
 *
 * An import is the admin's save: it is allowed when `skills.save` is `admin`, not when `off`.
 *
 * @module
 */
import { basename, join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { loadSettings } from "../config/settings.ts";
import { httpPrincipal } from "../principals.ts";
import { CodeExecutorError } from "../errors.ts";
import { parseSkillMarkdown } from "../skills/front_matter.ts";
import { CODE_FILE, notPlain, pathKind, readPlainFile } from "../skills/layout.ts";
import { type SkillRecord, SkillStore } from "../skills/store.ts";

const USAGE = `Usage:
  code-executor skills list [--principal P] [--json]
  code-executor skills show NAME[@N] [--principal P] [--json]
  code-executor skills rm NAME [--principal P]
  code-executor skills export NAME[@N] DIR [--principal P]
  code-executor skills import DIR [--principal P]

Skills live in .code-executor/skills/ (project) and ~/.config/code-executor/skills/ (user); over
HTTP with authentication each principal has its own directory (--principal shows its view).
`;

function write(text: string): void {
  Deno.stdout.writeSync(new TextEncoder().encode(text.endsWith("\n") ? text : text + "\n"));
}

function firstLine(text: string): string {
  const line = text.split("\n")[0];
  return line.length > 100 ? line.slice(0, 99) + "…" : line;
}

function describe(record: SkillRecord, versions: number[]): string {
  return [
    `${record.name}@${record.version}${record.latest ? " (latest)" : ""}`,
    `  scope:       ${record.scope} (${record.dir})`,
    `  language:    ${record.language}`,
    `  versions:    ${versions.join(", ")}`,
    `  description: ${record.description.replaceAll("\n", "\n               ")}`,
    `  input schema:`,
    JSON.stringify(record.inputSchema, null, 2).replace(/^/gm, "    "),
    `  program (${CODE_FILE[record.language]}):`,
    record.code.replace(/^/gm, "    "),
  ].join("\n");
}

/**
 * Reads a skill directory for an import: exactly `SKILL.md` and one program file, plain files (no
 * symlink), the front matter in the strict shape the store writes.
 *
 * @param dir The directory.
 * @param maxCodeBytes The largest program.
 * @returns What to save.
 * @throws {CodeExecutorError} `SkillInvalid`, naming what is wrong.
 */
async function readSkillDir(dir: string, maxCodeBytes: number) {
  const kind = await pathKind(dir);
  if (kind !== "directory") {
    if (kind === "missing") throw new CodeExecutorError("SkillInvalid", `No directory ${dir}`);
    throw notPlain(dir, kind);
  }
  const names: string[] = [];
  for await (const entry of Deno.readDir(dir)) names.push(entry.name);
  const allowed = ["SKILL.md", CODE_FILE.typescript, CODE_FILE.python];
  const other = names.filter((name) => !allowed.includes(name));
  if (other.length > 0 || !names.includes("SKILL.md")) {
    throw new CodeExecutorError(
      "SkillInvalid",
      `Cannot import ${dir}: a skill directory holds SKILL.md and skill.ts or skill.py only` +
        (other.length > 0
          ? ` (found ${other.slice(0, 5).map((n) => JSON.stringify(n)).join(", ")})`
          : ""),
    );
  }
  const skillMd = join(dir, "SKILL.md");
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(
      await readPlainFile(skillMd, 1024 * 1024),
    );
  } catch (error) {
    if (error instanceof TypeError) {
      throw new CodeExecutorError("SkillInvalid", `${skillMd} is not UTF-8`);
    }
    throw error;
  }
  const meta = parseSkillMarkdown(text, skillMd);
  const codeFile = CODE_FILE[meta.language];
  const wrong = meta.language === "typescript" ? CODE_FILE.python : CODE_FILE.typescript;
  if (!names.includes(codeFile) || names.includes(wrong)) {
    throw new CodeExecutorError(
      "SkillInvalid",
      `Cannot import ${dir}: a ${meta.language} skill holds ${codeFile} (and not ${wrong})`,
    );
  }
  let code: string;
  try {
    code = new TextDecoder("utf-8", { fatal: true }).decode(
      await readPlainFile(join(dir, codeFile), maxCodeBytes),
    );
  } catch (error) {
    if (error instanceof TypeError) {
      throw new CodeExecutorError("SkillInvalid", `${codeFile} is not UTF-8`);
    }
    throw error;
  }
  return {
    name: meta.name,
    description: meta.description,
    language: meta.language,
    inputSchema: meta.inputSchema,
    code,
  };
}

async function exportSkill(store: SkillStore, record: SkillRecord, out: string): Promise<string> {
  const target = join(resolve(out), record.name);
  if ((await pathKind(target)) !== "missing") {
    throw new CodeExecutorError(
      "SkillInvalid",
      `Cannot export to ${target}: it exists; remove it or pick another directory`,
    );
  }
  await Deno.mkdir(resolve(out), { recursive: true });
  await Deno.mkdir(target);
  for (const [name, bytes] of Object.entries(await store.files(record))) {
    await Deno.writeFile(join(target, name), bytes, { createNew: true, mode: 0o644 });
  }
  return target;
}

async function run(
  command: string,
  rest: string[],
  values: { principal?: string; json?: boolean },
) {
  const { settings } = await loadSettings();
  const store = new SkillStore(settings.skills, { listCacheMs: 0 });
  // The name as in the tokens file or the OAuth `sub`: the server's principal is `http:<name>`.
  const principal = values.principal === undefined ? undefined : httpPrincipal(values.principal);
  const expect = (count: number, usage: string) => {
    if (rest.length !== count) throw new TypeError(`Usage: code-executor skills ${usage}`);
  };
  switch (command) {
    case "list": {
      expect(0, "list");
      const records = await store.list(principal);
      if (values.json) {
        write(JSON.stringify(records.map(({ code: _code, ...r }) => r), null, 2));
      } else if (records.length === 0) {
        write(`No saved skills (${store.roots(principal).map((r) => r.dir).join(", ")})`);
      } else {
        for (const r of records) {
          write(`${r.name}@${r.version}  ${r.language}  ${r.scope}  ${firstLine(r.description)}`);
        }
      }
      return 0;
    }
    case "show": {
      expect(1, "show NAME[@N]");
      const record = await store.get(rest[0], principal);
      const versions = (await store.versions(record.name, principal)).map((r) => r.version);
      write(
        values.json ? JSON.stringify({ ...record, versions }, null, 2) : describe(record, versions),
      );
      return 0;
    }
    case "rm": {
      expect(1, "rm NAME");
      const versions = await store.versions(rest[0], principal);
      await store.remove(rest[0], principal);
      write(`Removed ${rest[0]} (${versions.length} version${versions.length === 1 ? "" : "s"})`);
      return 0;
    }
    case "export": {
      expect(2, "export NAME[@N] DIR");
      const record = await store.get(rest[0], principal);
      write(
        `Exported ${record.name}@${record.version} to ${await exportSkill(store, record, rest[1])}`,
      );
      return 0;
    }
    case "import": {
      expect(1, "import DIR");
      const input = await readSkillDir(resolve(rest[0]), settings.skills.maxCodeBytes);
      const saved = await store.save(input, principal, { admin: true });
      write(
        `Imported ${
          basename(resolve(rest[0]))
        } as ${saved.name}@${saved.version} (${saved.scope}: ${saved.dir})`,
      );
      return 0;
    }
    default:
      throw new TypeError(
        `Unknown skills command "${command}": expected list, show, rm, export or import`,
      );
  }
}

/**
 * Runs `code-executor skills …`.
 *
 * @param args The arguments after `skills`.
 * @returns The exit code: 0, or 1 when a skill is refused or not found (the message says why).
 * @throws {TypeError} For bad arguments.
 */
export async function skillsCommand(args: string[]): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({
      args,
      allowPositionals: true,
      options: {
        principal: { type: "string" },
        json: { type: "boolean" },
        help: { type: "boolean", short: "h" },
      },
    });
  } catch (error) {
    throw new TypeError(`Invalid arguments for skills: ${(error as Error).message}`);
  }
  const { values, positionals } = parsed;
  if (values.help || positionals.length === 0) {
    write(USAGE);
    return values.help ? 0 : 2;
  }
  const [command, ...rest] = positionals;
  try {
    return await run(command, rest, values);
  } catch (error) {
    if (!(error instanceof CodeExecutorError)) throw error;
    console.error(`code-executor: ${error.type}: ${error.message}`);
    return 1;
  }
}
