/**
 * The skill the skills tests and benchmarks save, a store over a test's dirs, and what a skills
 * root holds on disk.
 *
 * @module
 */
import { join } from "node:path";
import { SettingsSchema } from "../src/config/settings.ts";
import { type SaveSkillInput, SkillStore } from "../src/skills/store.ts";

/** A small TypeScript skill the skills tests save: `add-numbers`, `{a, b}` → `a + b`. */
export const ADD: SaveSkillInput = {
  name: "add-numbers",
  description: "Adds two numbers",
  language: "typescript",
  inputSchema: {
    type: "object",
    properties: { a: { type: "number" }, b: { type: "number" } },
    required: ["a", "b"],
  },
  code: "return args.a + args.b;",
};

/**
 * A skill store over a test's home and project directories, with no list cache, so that every
 * read sees what the test just wrote.
 *
 * @param dirs The `HOME` and the working directory.
 * @param overrides Settings under `skills` (`saveTo`, `admins`, `maxCodeBytes`, …).
 * @returns The store.
 */
export function storeIn(
  dirs: { home: string; project: string },
  overrides: Record<string, unknown> = {},
): SkillStore {
  return new SkillStore(SettingsSchema.parse({ skills: overrides }).skills, {
    cwd: dirs.project,
    env: { HOME: dirs.home },
    listCacheMs: 0,
  });
}

/**
 * Every path under a directory, symlinks as `-> target`, files with their text: compared before
 * and after, it shows what a refused operation wrote.
 *
 * @param root The directory.
 * @param options `skip`: a path prefix, relative to `root`, left out (a cache a run fills).
 * @returns Relative path (directories end in `/`) to content.
 */
export async function tree(
  root: string,
  options: { skip?: string } = {},
): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  const walk = async (dir: string) => {
    for await (const entry of Deno.readDir(dir)) {
      const path = join(dir, entry.name);
      const rel = path.slice(root.length + 1);
      if (options.skip !== undefined && rel.startsWith(options.skip)) continue;
      if (entry.isSymlink) out.set(rel, `-> ${await Deno.readLink(path)}`);
      else if (entry.isDirectory) {
        out.set(rel + "/", "");
        await walk(path);
      } else out.set(rel, await Deno.readTextFile(path));
    }
  };
  await walk(root);
  return out;
}
