/**
 * The skill the skills tests and benchmarks save.
 *
 * @module
 */
import type { SaveSkillInput } from "../src/skills/store.ts";

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
