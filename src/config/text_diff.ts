/**
 * Line diffs in the unified format, for showing what `setup` would change in a config file.
 *
 * @module
 */

/** Options of {@linkcode unifiedDiff}. */
export interface UnifiedDiffOptions {
  /** The name shown on the `---` line; defaults to `a`. */
  fromName?: string;
  /** The name shown on the `+++` line; defaults to `b`. */
  toName?: string;
  /** Unchanged lines shown around each change; defaults to 3. */
  context?: number;
}

type Op = { kind: " " | "-" | "+"; line: string };

/**
 * Returns the differences between two texts as a unified diff (`---`/`+++` header, `@@` hunks),
 * or an empty string when they are equal. Either text may be empty (a new or deleted file).
 *
 * @param before The old text.
 * @param after The new text.
 * @param options File names for the header, and the context size.
 * @returns The diff, ending with a newline, or `""`.
 * @example
 * ```ts
 * unifiedDiff("a\nb\n", "a\nc\n", { fromName: "x.json", toName: "x.json" });
 * // --- x.json\n+++ x.json\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n
 * ```
 */
export function unifiedDiff(
  before: string,
  after: string,
  options: UnifiedDiffOptions = {},
): string {
  if (before === after) return "";
  const a = splitLines(before);
  const b = splitLines(after);
  const ops = diffLines(a, b);
  const context = options.context ?? 3;
  const out = [`--- ${options.fromName ?? "a"}`, `+++ ${options.toName ?? "b"}`];
  let i = 0;
  while (i < ops.length) {
    if (ops[i].kind === " ") {
      i++;
      continue;
    }
    // A hunk: from `context` lines before this change to `context` lines after the last change
    // that is no more than 2 * context unchanged lines away from the previous one.
    let start = i;
    while (start > 0 && i - start < context && ops[start - 1].kind === " ") start--;
    let end = i;
    let lastChange = i;
    while (end < ops.length) {
      if (ops[end].kind !== " ") lastChange = end;
      else if (end - lastChange > 2 * context) break;
      end++;
    }
    end = Math.min(ops.length, lastChange + 1 + context);
    const hunk = ops.slice(start, end);
    const oldStart = ops.slice(0, start).filter((op) => op.kind !== "+").length;
    const newStart = ops.slice(0, start).filter((op) => op.kind !== "-").length;
    const oldCount = hunk.filter((op) => op.kind !== "+").length;
    const newCount = hunk.filter((op) => op.kind !== "-").length;
    out.push(`@@ -${range(oldStart, oldCount)} +${range(newStart, newCount)} @@`);
    for (const op of hunk) out.push(`${op.kind}${op.line}`);
    i = end;
  }
  return out.join("\n") + "\n";
}

function range(start: number, count: number): string {
  // Unified diffs number lines from 1; an empty range names the line before it.
  const first = count === 0 ? start : start + 1;
  return count === 1 ? `${first}` : `${first},${count}`;
}

function splitLines(text: string): string[] {
  if (text === "") return [];
  const lines = text.split("\n");
  if (lines[lines.length - 1] === "") lines.pop();
  return lines;
}

/** Myers' O((N+M)·D) shortest edit script; config edits are small, so D is. */
function diffLines(a: string[], b: string[]): Op[] {
  // Equal lines at both ends never need the search.
  let head = 0;
  while (head < a.length && head < b.length && a[head] === b[head]) head++;
  let tail = 0;
  while (
    tail < a.length - head && tail < b.length - head &&
    a[a.length - 1 - tail] === b[b.length - 1 - tail]
  ) tail++;
  const midA = a.slice(head, a.length - tail);
  const midB = b.slice(head, b.length - tail);
  const ops: Op[] = a.slice(0, head).map((line) => ({ kind: " ", line }));
  ops.push(...myers(midA, midB));
  ops.push(...a.slice(a.length - tail).map((line): Op => ({ kind: " ", line })));
  return ops;
}

function myers(a: string[], b: string[]): Op[] {
  const n = a.length;
  const m = b.length;
  const max = n + m;
  const offset = max + 1;
  let v = new Array<number>(2 * max + 3).fill(0);
  const trace: number[][] = [];
  outer: for (let d = 0; d <= max; d++) {
    trace.push(v.slice());
    const next = v.slice();
    for (let k = -d; k <= d; k += 2) {
      let x = k === -d || (k !== d && v[offset + k - 1] < v[offset + k + 1])
        ? v[offset + k + 1]
        : v[offset + k - 1] + 1;
      let y = x - k;
      while (x < n && y < m && a[x] === b[y]) {
        x++;
        y++;
      }
      next[offset + k] = x;
      if (x >= n && y >= m) {
        v = next;
        trace.push(v.slice());
        break outer;
      }
    }
    v = next;
  }
  // Walk the trace back from the end to recover the edits.
  const ops: Op[] = [];
  let x = n;
  let y = m;
  for (let d = trace.length - 2; d >= 0 && (x > 0 || y > 0); d--) {
    const prev = trace[d];
    const k = x - y;
    const down = k === -d || (k !== d && prev[offset + k - 1] < prev[offset + k + 1]);
    const prevK = down ? k + 1 : k - 1;
    const prevX = prev[offset + prevK];
    const prevY = prevX - prevK;
    while (x > prevX && y > prevY) {
      ops.push({ kind: " ", line: a[x - 1] });
      x--;
      y--;
    }
    if (d === 0) break;
    if (down) {
      ops.push({ kind: "+", line: b[y - 1] });
      y--;
    } else {
      ops.push({ kind: "-", line: a[x - 1] });
      x--;
    }
  }
  while (x > 0 && y > 0) {
    ops.push({ kind: " ", line: a[x - 1] });
    x--;
    y--;
  }
  return ops.reverse();
}
