/**
 * JSONC syntax errors in words a person reads: where (`file:line:column`), what is wrong, and
 * the line itself with a caret under the place, instead of jsonc-parser's error codes
 * (`CommaExpected at line 5`). Settings files and MCP config files both report through here.
 *
 * @module
 */
import { parse, type ParseError, printParseErrorCode } from "jsonc-parser";
import { redactText } from "../redact.ts";

/** Where a syntax error is and what it is, for a caller that words it its own way. */
export interface JsoncSyntaxProblem {
  /** 1-based line. */
  line: number;
  /** 1-based column. */
  column: number;
  /** What is wrong, in words. */
  reason: string;
  /** The line and a caret under the column, indented, two lines. */
  excerpt: string;
}

/** A line longer than this is shown as a window around the column (a minified file). */
const MAX_SHOWN_LINE = 120;

/**
 * Parses JSONC (comments and trailing commas allowed) and returns the first syntax problem, if
 * any.
 *
 * @param text The file's contents.
 * @returns The value, or the first problem (later ones are usually the same mistake, echoed).
 */
export function parseJsoncChecked(
  text: string,
): { value: unknown; problem?: undefined } | { value?: undefined; problem: JsoncSyntaxProblem } {
  const errors: ParseError[] = [];
  const value = parse(text, errors, { allowTrailingComma: true, disallowComments: false });
  if (errors.length === 0) return { value };
  return { problem: describeJsoncError(text, errors[0]) };
}

/**
 * Renders a syntax problem as the message people see: `Cannot parse FILE:LINE:COLUMN: reason`,
 * then the line and the caret.
 *
 * @param file The file's path.
 * @param problem The problem.
 * @returns Three lines.
 */
export function formatJsoncProblem(file: string, problem: JsoncSyntaxProblem): string {
  return `Cannot parse ${file}:${problem.line}:${problem.column}: ${problem.reason}\n${problem.excerpt}`;
}

/** Locates one jsonc-parser error and says what it means. */
function describeJsoncError(text: string, error: ParseError): JsoncSyntaxProblem {
  const content = text.trimEnd();
  const atEnd = error.offset >= content.length;
  // At the end of the text, point just past the last character rather than at an empty last line.
  const offset = atEnd ? content.length : error.offset;
  const before = text.slice(0, offset);
  const lineStart = before.lastIndexOf("\n") + 1;
  const line = before.split("\n").length;
  const column = offset - lineStart + 1;
  let lineEnd = text.indexOf("\n", lineStart);
  if (lineEnd < 0) lineEnd = text.length;
  const lineText = text.slice(lineStart, lineEnd).replace(/\r$/, "");
  const found = text.slice(error.offset, error.offset + Math.min(error.length, 20));
  return {
    line,
    column,
    reason: reasonOf(printParseErrorCode(error.error), {
      atEnd,
      empty: content.length === 0,
      found,
    }),
    excerpt: excerpt(lineText, column, line),
  };
}

function reasonOf(
  code: ReturnType<typeof printParseErrorCode>,
  at: { atEnd: boolean; empty: boolean; found: string },
): string {
  const ends = "the file ends";
  switch (code) {
    case "CommaExpected":
      return 'a "," is missing before this (entries of an object or an array are separated by commas)';
    case "ColonExpected":
      return 'a ":" is missing after the property name';
    case "PropertyNameExpected":
      return 'expected a property name in double quotes ("name")';
    case "ValueExpected":
      if (at.empty) return 'the file is empty (an empty config is {"mcpServers": {}})';
      if (at.atEnd) return `${ends} where a value is expected`;
      return "expected a value here (a string in double quotes, a number, true, false, null, an object or an array)";
    case "CloseBraceExpected":
      return at.atEnd
        ? `${ends} before an object is closed: a "}" is missing`
        : 'expected "}" or "," here';
    case "CloseBracketExpected":
      return at.atEnd
        ? `${ends} before an array is closed: a "]" is missing`
        : 'expected "]" or "," here';
    case "EndOfFileExpected":
      return 'unexpected text after the end of the top-level value (one "}" or "]" too many?)';
    case "InvalidSymbol":
      return `unexpected ${
        JSON.stringify(at.found)
      }: property names and strings need double quotes, and a value is a string, a number, true, false, null, an object or an array`;
    case "UnexpectedEndOfString":
      return 'a string is not closed: a "\\"" is missing, or a line break inside a string must be written \\n';
    case "UnexpectedEndOfComment":
      return 'a "/*" comment is not closed with "*/"';
    case "InvalidCommentToken":
      return "this is not a comment (comments are // … and /* … */)";
    case "InvalidEscapeCharacter":
      return 'a backslash in a string starts an escape: write "\\\\" for a backslash (as in "C:\\\\Users")';
    case "InvalidUnicode":
      return "a \\u escape needs four hexadecimal digits";
    case "InvalidCharacter":
      return "a control character (a tab or a line break) inside a string must be escaped (\\t, \\n)";
    case "InvalidNumberFormat":
    case "UnexpectedEndOfNumber":
      return "this is not a valid number";
    default:
      return "this is not valid JSON";
  }
}

function excerpt(lineText: string, column: number, line: number): string {
  let shown = lineText;
  let caretAt = column - 1;
  if (shown.length > MAX_SHOWN_LINE) {
    const start = Math.max(
      0,
      Math.min(caretAt - MAX_SHOWN_LINE / 2, shown.length - MAX_SHOWN_LINE),
    );
    const end = start + MAX_SHOWN_LINE;
    shown = (start > 0 ? "…" : "") + shown.slice(start, end) + (end < lineText.length ? "…" : "");
    caretAt = caretAt - start + (start > 0 ? 1 : 0);
  }
  // The line goes into logs: a key written in it is no business of theirs. Redaction may shorten
  // what comes before the caret, so the caret follows the redacted prefix.
  const redacted = redactText(shown);
  if (redacted !== shown) {
    caretAt = Math.min(redactText(shown.slice(0, caretAt)).length, redacted.length);
    shown = redacted;
  }
  // Tabs stay tabs under the line, so that the caret lines up however wide a terminal draws them.
  const pad = shown.slice(0, caretAt).replace(/[^\t]/g, " ");
  const number = String(line);
  return `  ${number} | ${shown}\n  ${" ".repeat(number.length)} | ${pad}^`;
}
