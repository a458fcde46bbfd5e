import { assertEquals } from "./_assert.ts";
import { unifiedDiff } from "../src/config/text_diff.ts";

Deno.test("unifiedDiff() shows changed lines with context and line numbers", () => {
  const lines = Array.from({ length: 20 }, (_, i) => `line ${i + 1}`);
  const changed = lines.map((line, i) => (i === 4 ? "LINE 5" : line));
  changed.push("line 21");
  assertEquals(
    unifiedDiff(lines.join("\n") + "\n", changed.join("\n") + "\n", { fromName: "x", toName: "x" }),
    [
      "--- x",
      "+++ x",
      "@@ -2,7 +2,7 @@",
      " line 2",
      " line 3",
      " line 4",
      "-line 5",
      "+LINE 5",
      " line 6",
      " line 7",
      " line 8",
      "@@ -18,3 +18,4 @@",
      " line 18",
      " line 19",
      " line 20",
      "+line 21",
      "",
    ].join("\n"),
  );
  // Changes closer than twice the context share a hunk.
  assertEquals(
    unifiedDiff("a\nb\nc\nd\n", "A\nb\nc\nD\n"),
    "--- a\n+++ b\n@@ -1,4 +1,4 @@\n-a\n+A\n b\n c\n-d\n+D\n",
  );
  assertEquals(unifiedDiff("same\n", "same\n"), "");
  assertEquals(
    unifiedDiff("", "new\n", { fromName: "/dev/null", toName: "n" }),
    "--- /dev/null\n+++ n\n@@ -0,0 +1 @@\n+new\n",
  );
});
