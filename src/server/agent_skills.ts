/**
 * Saved skills as MCP Agent Skills (SEP-2640, `io.modelcontextprotocol/skills`), through the SDK's
 * extension: `skills/list` and `skills/get` return the latest version of each skill the caller
 * sees (its own and the shared ones over HTTP), with a SHA-256 manifest of its two files, and
 * `resources/read` of `skill://<name>/SKILL.md` or `skill://<name>/skill.ts|py` returns them.
 * Each `SKILL.md` is also in `resources/list`, named and described by its front matter.
 *
 * Entries are built from the skill's files (`skillEntry` hashes them) and kept while the files'
 * size, inode and modification time stay the same (for a skill in the shared state store, while
 * it is the same save), so a listing does not hash every file again.
 *
 * @module
 */
import type { McpServer, ServerContext } from "@modelcontextprotocol/server";
import {
  type Skill,
  skillEntry,
  type SkillReadResult,
  SkillsExtension,
  type SkillSource,
} from "@modelcontextprotocol/server/ext/skills";
import { LOCAL_PRINCIPAL } from "../principals.ts";
import type { Logger } from "../log.ts";
import type { SkillRecord, SkillStore } from "../skills/store.ts";
import { SKILL_NAME_PATTERN } from "../skills/validate.ts";

const BASE = "skill://";

const MIME: Record<string, string> = {
  "SKILL.md": "text/markdown",
  "skill.ts": "text/typescript",
  "skill.py": "text/x-python",
};

function principalOf(ctx: ServerContext): string {
  return ctx.http?.authInfo?.clientId ?? LOCAL_PRINCIPAL;
}

/** `skill://<name>/<file>` → its parts, or undefined for any other URI. */
function parseUri(uri: string): { name: string; file: string } | undefined {
  if (!uri.startsWith(BASE)) return undefined;
  const [name, file, ...rest] = uri.slice(BASE.length).split("/");
  if (rest.length > 0 || file === undefined || !SKILL_NAME_PATTERN.test(name)) return undefined;
  if (!(file in MIME)) return undefined;
  return { name, file };
}

interface CachedEntry {
  key: string;
  entry: Skill;
}

/** Builds and caches the entries of a store's skills. */
class SkillEntries {
  readonly #store: SkillStore;
  readonly #cache = new Map<string, CachedEntry>();

  constructor(store: SkillStore) {
    this.#store = store;
  }

  async entry(record: SkillRecord): Promise<Skill> {
    const key = await this.#store.fingerprint(record);
    const cached = this.#cache.get(record.dir);
    if (cached?.key === key) return cached.entry;
    const entry = await skillEntry(record.name, await this.#store.files(record), { baseUri: BASE });
    this.#cache.set(record.dir, { key, entry });
    return entry;
  }
}

function skillSource(store: SkillStore, log: Logger | undefined): SkillSource {
  const entries = new SkillEntries(store);
  const recordOf = async (name: string, ctx: ServerContext) => {
    try {
      return await store.get(name, principalOf(ctx));
    } catch (error) {
      log?.debug(`skills: ${name}: ${(error as Error).message}`);
      return undefined;
    }
  };
  const listed = async (ctx: ServerContext): Promise<Skill[]> => {
    const out: Skill[] = [];
    for (const record of await store.list(principalOf(ctx))) {
      try {
        out.push(await entries.entry(record));
      } catch (error) {
        log?.warn(`skills: left ${record.dir} out: ${(error as Error).message}`);
      }
    }
    return out;
  };
  return {
    async list(_params, ctx) {
      return { skills: await listed(ctx) };
    },
    async get(uri, ctx) {
      const parsed = parseUri(uri);
      if (parsed === undefined || parsed.file !== "SKILL.md") return undefined;
      const record = await recordOf(parsed.name, ctx);
      return record === undefined ? undefined : await entries.entry(record);
    },
    async read(uri, ctx): Promise<SkillReadResult | undefined> {
      const parsed = parseUri(uri);
      if (parsed === undefined) return undefined;
      const record = await recordOf(parsed.name, ctx);
      if (record === undefined) return undefined;
      const bytes = (await store.files(record))[parsed.file];
      if (bytes === undefined) return undefined;
      return { text: new TextDecoder().decode(bytes), mimeType: MIME[parsed.file] };
    },
    async listResources(ctx) {
      return (await listed(ctx)).map((entry) => ({
        uri: entry.uri,
        name: entry.frontmatter.name,
        description: entry.frontmatter.description,
        mimeType: "text/markdown",
      }));
    },
  };
}

const extensions = new WeakMap<SkillStore, SkillsExtension>();

/**
 * Serves a store's skills on a server through the SDK's skills extension (one extension per
 * store, attached to each server before it connects).
 *
 * @param server The MCP server, not yet connected.
 * @param store The skills store.
 * @returns Nothing.
 * @internal It takes the MCP SDK's server type, which `deno doc --lint` takes for a private one
 * (denoland/deno#27364); the SDK documents it.
 */
export function attachAgentSkills(server: McpServer, store: SkillStore): void {
  const log = store.log;
  let extension = extensions.get(store);
  if (extension === undefined) {
    extension = new SkillsExtension({
      source: skillSource(store, log),
      onWarning: (warning) => log?.warn(`skills: ${warning.path}: ${warning.message}`),
    });
    extensions.set(store, extension);
  }
  extension.attach(server);
}
