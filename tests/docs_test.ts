/**
 * The README and the pages under docs/ hold together: every relative link names a file that
 * exists and, where it names a heading, a heading of that file; and the README stays a front
 * door (at most 12,000 bytes) that links to the pages rather than holding them.
 *
 * @module
 */
import { dirname, join, normalize } from "node:path";
import { assert, assertEquals } from "./_assert.ts";
import { ROOT } from "./_helpers.ts";

/** The pages a reader follows: the README and every Markdown file under docs/. */
async function pages(): Promise<string[]> {
  const found = ["README.md"];
  for await (const entry of Deno.readDir(join(ROOT, "docs"))) {
    if (entry.isFile && entry.name.endsWith(".md")) found.push(join("docs", entry.name));
  }
  return found.sort();
}

function withoutCode(text: string): string {
  return text.replace(/^```[\s\S]*?^```/gm, "");
}

/** A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens. */
function anchorOf(heading: string): string {
  return heading.trim().toLowerCase().replace(/[^\p{L}\p{N}_\- ]/gu, "").replaceAll(" ", "-");
}

async function anchors(path: string): Promise<Set<string>> {
  const text = withoutCode(await Deno.readTextFile(join(ROOT, path)));
  return new Set([...text.matchAll(/^#+\s+(.+)$/gm)].map((match) => anchorOf(match[1])));
}

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(join(ROOT, path));
    return true;
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return false;
    throw error;
  }
}

Deno.test("every relative link of README.md and docs/ names a file and heading that exist", async () => {
  const broken: string[] = [];
  let checked = 0;
  for (const page of await pages()) {
    const text = withoutCode(await Deno.readTextFile(join(ROOT, page)));
    for (const [, url] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      if (/^[a-z]+:/.test(url)) continue;
      checked++;
      const [path, anchor] = url.split("#");
      const target = path ? normalize(join(dirname(page), path)) : page;
      if (!await exists(target)) broken.push(`${page}: ${url} (no such file)`);
      else if (anchor && target.endsWith(".md") && !(await anchors(target)).has(anchor)) {
        broken.push(`${page}: ${url} (no such heading in ${target})`);
      }
    }
  }
  assert(checked > 50, `only ${checked} links found: the link pattern is wrong`);
  assertEquals(broken, []);
});

Deno.test("README.md is a front door: at most 12,000 bytes, and it links every docs/ page", async () => {
  const readme = await Deno.readTextFile(join(ROOT, "README.md"));
  const bytes = new TextEncoder().encode(readme).length;
  assert(bytes <= 12_000, `README.md is ${bytes} bytes; move detail into a docs/ page`);
  const unlinked = (await pages()).filter((page) =>
    page !== "README.md" && !readme.includes(`(${page})`)
  );
  assertEquals(unlinked, [], "docs/ pages the README's Documentation list does not link");
});
