/**
 * JSON Schemas and a check that the schema and signature tests share.
 *
 * @module
 */
import { assert } from "./_assert.ts";

/** A recursive schema: a tree of nodes that hold a number and their children. */
export const TREE = {
  $defs: {
    Node: {
      type: "object",
      properties: {
        value: { type: "number" },
        children: { type: "array", items: { $ref: "#/$defs/Node" } },
      },
      required: ["value"],
    },
  },
  $ref: "#/$defs/Node",
};

/** Twenty optional strings: too long for one line. */
export const properties = Object.fromEntries(
  Array.from({ length: 20 }, (_, i) => [`property${i}`, { type: "string" }]),
);

/** Returns the bodies of every `/** … *\/` comment, asserting that each one is on one line. */
export function docComments(text: string): string[] {
  const bodies: string[] = [];
  let from = 0;
  for (;;) {
    const start = text.indexOf("/**", from);
    if (start === -1) break;
    const end = text.indexOf("*/", start + 3);
    assert(end !== -1, `unterminated comment in ${text}`);
    const body = text.slice(start + 3, end);
    assert(!/[\n\r\u2028\u2029]/.test(body), `line break inside a doc comment: ${body}`);
    bodies.push(body);
    from = end + 2;
  }
  return bodies;
}
