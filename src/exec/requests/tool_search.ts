/**
 * One search over upstream tools and saved skills, for the MCP tool `search_tools` and the
 * in-sandbox `searchTools` / `search_tools`: both are ranked by the same score
 * (`matchScore`), tools the admin's or the run's policy refuses are left out, and each skill is
 * marked as one (`kind: "skill"`, named `skill:<name>@<version>`, with a `skills.<name>(args)`
 * signature). Saved skills never enter `tools/list`.
 *
 * @module
 */
import type { ToolPolicy } from "../../policy/tool_policy.ts";
import type { SkillRecord } from "../../skills/store.ts";
import type { CatalogEntry, ToolCatalog } from "../../upstream/catalog.ts";
import { matchScore, searchTerms } from "../../upstream/catalog.ts";

/** One search result: an upstream tool or a saved skill. */
export type SearchHit =
  | { kind: "tool"; score: number; entry: CatalogEntry }
  | { kind: "skill"; score: number; skill: SkillRecord };

/** What a search looks through. */
export interface SearchSources {
  /** The upstream tools, if any servers are configured. */
  catalog?: ToolCatalog;
  /** The policy that refuses tools (refused ones are left out). */
  policy: ToolPolicy;
  /** The skills the caller sees (the latest version of each). */
  skills?: () => Promise<readonly SkillRecord[]>;
}

/**
 * Ranks upstream tools and saved skills together for a query.
 *
 * @param sources The catalog, the policy and the caller's skills.
 * @param query Words to look for; empty lists everything (skills first, then tools).
 * @param limit How many hits to return.
 * @returns The best hits first.
 */
export async function searchToolsAndSkills(
  sources: SearchSources,
  query: string,
  limit: number,
): Promise<SearchHit[]> {
  const terms = searchTerms(query);
  const hits: SearchHit[] = [];
  if (sources.skills) {
    for (const skill of await sources.skills()) {
      const score = terms.length === 0 ? 0 : matchScore(terms, {
        fullName: `skill:${skill.name}`,
        name: skill.name,
        server: "skills",
        description: skill.description,
      });
      if (score > 0 || terms.length === 0) hits.push({ kind: "skill", score, skill });
    }
  }
  if (sources.catalog) {
    // Refused tools are dropped after ranking, so rank them all and cut afterwards.
    for (const entry of await sources.catalog.search(query, { limit: Infinity })) {
      if (sources.policy.check(entry.fullName) !== undefined) continue;
      hits.push({ kind: "tool", score: terms.length === 0 ? 0 : matchScore(terms, entry), entry });
    }
  }
  // Stable: equal scores keep skills (sorted by name) ahead of tools (in the catalog's order).
  return hits.sort((a, b) => b.score - a.score).slice(0, limit);
}
