import { assertEquals } from "./_assert.ts";
import { removeProperty, setProperty } from "../src/config/jsonc_edit.ts";

Deno.test("setProperty() and removeProperty() change only the property's own text", () => {
  const text = `{
  // servers
  "mcpServers": {
    "github": { "command": "npx" }, // c1
    "memory": {
      "command": "npx"
    } // c2
  },
  "inline": { "a": 1, "b": 2 },
  "empty": {}
}
`;
  // The last entry goes with its comment and the comma before it: strict JSON stays strict.
  assertEquals(
    removeProperty(text, ["mcpServers", "memory"]),
    text.replace(', // c1\n    "memory": {\n      "command": "npx"\n    } // c2\n', " // c1\n"),
  );
  assertEquals(
    removeProperty(text, ["mcpServers", "github"]),
    text.replace('    "github": { "command": "npx" }, // c1\n', ""),
  );
  assertEquals(removeProperty(text, ["inline", "b"]), text.replace('"a": 1, "b": 2', '"a": 1'));
  assertEquals(removeProperty(text, ["inline", "a"]), text.replace('"a": 1, "b": 2', '"b": 2'));
  assertEquals(removeProperty(text, ["nothing", "here"]), text);
  assertEquals(
    setProperty(text, ["mcpServers", "x"], { args: ["a"] }),
    text.replace(
      '"mcpServers": {\n',
      '"mcpServers": {\n    "x": {\n      "args": [\n        "a"\n      ]\n    },\n',
    ),
  );
  assertEquals(
    setProperty(text, ["inline", "c"], [1]),
    text.replace('{ "a": 1', '{ "c": [1], "a": 1'),
  );
  assertEquals(
    setProperty(text, ["empty", "k"], true),
    text.replace('"empty": {}', '"empty": {\n    "k": true\n  }'),
  );
  assertEquals(setProperty(text, ["inline", "a"], 3), text.replace('"a": 1', '"a": 3'));
  assertEquals(
    setProperty('{\n\t"x": 1\n}\n', ["servers", "s"], { a: 1 }),
    '{\n\t"servers": {\n\t\t"s": {\n\t\t\t"a": 1\n\t\t}\n\t},\n\t"x": 1\n}\n',
  );
});
