/**
 * Sandbox code that reads a child's frame nonce out of its own isolate: the nonce is no secret
 * (a V8 heap snapshot through `node:v8` needs no permission), and the tests that forge frames
 * with it, from TypeScript and from Python's Worker, find it the same way.
 *
 * @module
 */

/**
 * A JavaScript expression whose value is a promise of the nonce: it takes a heap snapshot of the
 * isolate it runs in and looks for the module variable named `nonce` that holds a token of 20 or
 * more letters and digits. It rejects when there is none.
 */
export const FIND_NONCE = `(async () => {
  const v8 = await import("node:v8");
  let text = "";
  for await (const chunk of v8.getHeapSnapshot()) {
    text += typeof chunk === "string" ? chunk : new TextDecoder().decode(chunk);
  }
  const snapshot = JSON.parse(text);
  text = "";
  const meta = snapshot.snapshot.meta;
  const nodeFields = meta.node_fields.length;
  const edgeFields = meta.edge_fields.length;
  const edgeCount = meta.node_fields.indexOf("edge_count");
  const contextEdge = meta.edge_types[0].indexOf("context");
  for (let node = 0, edge = 0; node < snapshot.nodes.length; node += nodeFields) {
    for (let k = 0; k < snapshot.nodes[node + edgeCount]; k++, edge += edgeFields) {
      const [type, name, to] = snapshot.edges.slice(edge, edge + 3);
      if (type !== contextEdge || snapshot.strings[name] !== "nonce") continue;
      const value = snapshot.strings[snapshot.nodes[to + 1]];
      if (/^[A-Za-z0-9]{20,}$/.test(value)) return value;
    }
  }
  throw new Error("the nonce is not in the heap snapshot");
})()`;
