/**
 * Untrusted text made safe to paste into generated TypeScript. Server names, tool names and
 * descriptions come from upstream servers: each function here keeps such text inside the string
 * literal or comment it is put in, on the lines it is meant for, and bounded in length. Tool
 * signatures (`signatures.ts`, `schema_to_type.ts`) and the typed wrappers (`src/codegen/`) put
 * upstream text into code only through these.
 *
 * @module
 */

const MAX_DESCRIPTION = 300;

/**
 * Characters that could hide in text or change how it reads: control and format characters
 * (zero-width ones, bidi overrides, the BOM), surrogates, private-use and unassigned code points.
 * A zero-width joiner between `*` and `/` is not the end of a comment to TypeScript, but it looks
 * like one to a model.
 */
const HIDDEN = /\p{C}/gu;

/**
 * Neutralizes what could make text read as something outside its comment to a model: a backtick
 * (a Markdown code span or fence around the signatures) becomes `'`, and a `<` that opens a tag,
 * a chat-template token or a comment (`</tool>`, `<system>`, `<|im_start|>`, `<!--`) becomes `‹`.
 */
function inertProse(text: string): string {
  return text.replaceAll("`", "'").replace(/<(?=[A-Za-z/!?|])/g, "\u2039");
}

/** Makes untrusted text safe inside a one-line `/** … *\/` comment, at most `max` characters. */
function sanitizeDoc(text: string, max = MAX_DESCRIPTION): string {
  // Hidden characters (newlines included) become spaces, then \s (which also covers U+2028 and
  // U+2029) collapses, so the comment stays on one line and reads as written.
  let doc = inertProse(text.replace(HIDDEN, " ")).replace(/\s+/g, " ").trim();
  const chars = Array.from(doc);
  if (chars.length > max) {
    doc = chars.slice(0, max - 1).join("").trimEnd() + "…";
  }
  return doc.replaceAll("*/", "*\\/");
}

/**
 * Returns text for a `//` comment: verbatim, unless it holds a character that could end the
 * line or hide in it (a control character or a line or paragraph separator); then the whole
 * text is a quoted string, so that a full tool name stays readable and cannot start a new line
 * of code.
 *
 * @param text A name, untrusted.
 * @returns The text, or its string literal.
 */
export function lineCommentText(text: string): string {
  return /[\p{C}\p{Zl}\p{Zp}<>`]|\*\//u.test(text) ? quote(text) : text;
}

/** `\uXXXX` for each UTF-16 unit of a character (two for one past U+FFFF). */
function escapeUnits(char: string): string {
  let out = "";
  for (let i = 0; i < char.length; i++) {
    out += `\\u${char.charCodeAt(i).toString(16).padStart(4, "0")}`;
  }
  return out;
}

/**
 * A JSON string literal that is also a one-line TypeScript string literal, with every character
 * that could hide or read as markup (`\p{C}`, line and paragraph separators, `<`, `>`, backtick)
 * written as a `\uXXXX` escape: the value is the same, the text shows nothing but the escape.
 */
function quote(text: string): string {
  return JSON.stringify(text).replace(
    /[\p{C}\p{Zl}\p{Zp}<>`]/gu,
    escapeUnits,
  );
}

/**
 * JSON text whose parse is exactly `value`, with every character that could hide or read as
 * markup inside its strings escaped as `\uXXXX` (as {@linkcode stringLiteral} does): for JSON
 * that the model reads (`search_tools` with `detail: "schemas"`).
 *
 * @param value A JSON value, untrusted.
 * @returns The JSON text.
 */
export function inertJson(value: unknown): string {
  return (JSON.stringify(value) ?? "null").replace(
    /[\p{C}\p{Zl}\p{Zp}<>`]/gu,
    escapeUnits,
  );
}

/**
 * Returns a TypeScript string literal whose value is exactly `text`: a JSON string with the line
 * separators U+2028 and U+2029 escaped as well, so it stays on one line. Lone surrogates are kept
 * as `\\uXXXX` escapes.
 *
 * @param text Any text, untrusted.
 * @returns A double-quoted literal, safe to paste into generated code.
 *
 * @example
 * ```ts
 * stringLiteral('say "hi"\n'); // '"say \\"hi\\"\\n"'
 * ```
 */
export function stringLiteral(text: string): string {
  return quote(String(text));
}

/** Options of {@linkcode docCommentLines}. */
export interface DocCommentLinesOptions {
  /** Characters kept before the text is cut with `…`. Default 4000. */
  maxChars?: number;
  /** Lines kept before the text is cut with `…`. Default 60. */
  maxLines?: number;
}

/**
 * Splits untrusted text into lines that are safe inside a multi-line `/** … *\/` comment: every
 * line break (CR, LF, U+2028, U+2029) ends a line, other control characters and bidi overrides
 * become spaces, `*\/` cannot close the comment, and the text is bounded. Blank lines at either
 * end are dropped; an empty text gives no lines.
 *
 * @param text The description, verbatim.
 * @param options Bounds.
 * @returns The lines, without the ` * ` prefix.
 *
 * @example
 * ```ts
 * docCommentLines("Reads *\/ a file\nSecond line"); // ["Reads *\\/ a file", "Second line"]
 * ```
 */
export function docCommentLines(text: string, options: DocCommentLinesOptions = {}): string[] {
  const maxChars = options.maxChars ?? 4000;
  const maxLines = options.maxLines ?? 60;
  let chars = Array.from(String(text));
  let cut = false;
  if (chars.length > maxChars) {
    chars = chars.slice(0, maxChars);
    cut = true;
  }
  let lines = chars.join("").split(/\r\n|[\r\n\u2028\u2029]/).map((line) =>
    inertProse(line.replace(HIDDEN, " ")).trimEnd()
  );
  while (lines.length > 0 && lines[0].trim() === "") lines.shift();
  while (lines.length > 0 && lines.at(-1)!.trim() === "") lines.pop();
  if (lines.length > maxLines) {
    lines = lines.slice(0, maxLines);
    cut = true;
  }
  if (cut && lines.length > 0) lines[lines.length - 1] += "…";
  // "*" and "/" can also meet across the cut or an escaped pair; escaping every "*/" after the
  // lines are final leaves no way to end the comment.
  return lines.map((line) => line.replaceAll("*/", "*\\/"));
}

/**
 * Makes untrusted text safe and short for a one-line `/** … *\/` comment (at most 300
 * characters unless told): the form tool signatures use for descriptions.
 *
 * @param text The description, verbatim.
 * @param max At most this many characters (a down server's error, which ends with what to do,
 *   is given more room than a description).
 * @returns One line, possibly empty.
 */
export function oneLineDoc(text: string, max = MAX_DESCRIPTION): string {
  return sanitizeDoc(String(text), max);
}
