/**
 * Edits of JSONC text that touch only the property being changed: every other byte (comments,
 * blank lines, the layout of neighbouring entries) stays as it was.
 *
 * jsonc-parser's `modify` does the same job, but with formatting on it re-formats every line
 * the edit touches (a one-line neighbour becomes five lines), and without it a removal takes the
 * neighbour's trailing comment along. These functions locate nodes with its `parseTree` and
 * write the edits themselves, applied with `applyEdits`.
 *
 * @module
 */
import { applyEdits, type Edit, findNodeAtLocation, type Node, parseTree } from "jsonc-parser";

/** How new text is laid out. */
export interface JsoncLayout {
  /** One level of indentation, e.g. two spaces or a tab. */
  indent: string;
  /** Line end. */
  eol: string;
}

/**
 * Detects the indentation unit and line ends a file already uses (two spaces when it has none).
 *
 * @param text The file's text.
 * @returns The layout.
 */
export function layoutOf(text: string): JsoncLayout {
  const eol = text.includes("\r\n") ? "\r\n" : "\n";
  const indent = text.match(/^([ \t]+)["}\]]/m)?.[1];
  if (indent?.startsWith("\t")) return { indent: "\t", eol };
  return { indent: " ".repeat(indent ? Math.min(indent.length, 8) : 2), eol };
}

/**
 * Sets a property: replaces its value when it exists, otherwise inserts it as the first property
 * of its object (creating missing parent objects). The root must be an object.
 *
 * @param text JSONC text whose root is an object.
 * @param path Property names from the root; at least one.
 * @param value Any JSON value.
 * @returns The new text.
 * @throws {TypeError} When the root or a parent on the path is not an object.
 */
export function setProperty(text: string, path: string[], value: unknown): string {
  const layout = layoutOf(text);
  const root = parseTree(text, [], { allowTrailingComma: true, disallowComments: false });
  if (!root || root.type !== "object") {
    throw new TypeError("Cannot edit the config: its top level is not an object");
  }
  const existing = findNodeAtLocation(root, path);
  if (existing) {
    const old = text.slice(existing.offset, existing.offset + existing.length);
    const content = old.includes("\n")
      ? pretty(value, lineIndent(text, existing.offset), layout)
      : compact(value);
    return apply(text, [{ offset: existing.offset, length: existing.length, content }]);
  }
  // The deepest object that exists gets the rest of the path as nested objects.
  let depth = path.length - 1;
  let parent = findNodeAtLocation(root, path.slice(0, depth));
  while (!parent && depth > 0) parent = findNodeAtLocation(root, path.slice(0, --depth));
  if (!parent || parent.type !== "object") {
    throw new TypeError(
      `Cannot edit the config: "${path.slice(0, depth).join(".")}" is not an object`,
    );
  }
  let nested: unknown = value;
  for (let i = path.length - 1; i > depth; i--) nested = { [path[i]]: nested };
  return apply(text, [insertion(text, parent, path[depth], nested, layout)]);
}

/**
 * Removes a property together with its line, its separating comma and a comment on the same
 * line after it; comments on other lines stay. When the property was the last one, the comma
 * before it goes too, so that a strict JSON file stays strict JSON.
 *
 * @param text JSONC text.
 * @param path Property names from the root.
 * @returns The new text (the same text when there is no such property).
 */
export function removeProperty(text: string, path: string[]): string {
  const root = parseTree(text, [], { allowTrailingComma: true, disallowComments: false });
  const value = root && findNodeAtLocation(root, path);
  const property = value?.parent;
  const object = property?.parent;
  if (!property || property.type !== "property" || !object) return text;
  const siblings = object.children ?? [];
  const index = siblings.indexOf(property);
  let start = property.offset;
  let end = skipSpaces(text, property.offset + property.length);
  const hasComma = text[end] === ",";
  if (hasComma) end = skipSpaces(text, end + 1);
  const edits: Edit[] = [];
  if (text.startsWith("//", end)) {
    while (end < text.length && text[end] !== "\n" && text[end] !== "\r") end++;
  }
  const lineStart = text.lastIndexOf("\n", start - 1) + 1;
  const ownLines = /^[ \t]*$/.test(text.slice(lineStart, start)) &&
    (end >= text.length || text[end] === "\n" || text[end] === "\r");
  if (ownLines) {
    start = lineStart;
    end += text.startsWith("\r\n", end) ? 2 : end < text.length ? 1 : 0;
  } else if (!hasComma && index > 0) {
    // Inline and last: take the comma (and spaces) before it instead.
    const previous = siblings[index - 1];
    start = previous.offset + previous.length;
    end = property.offset + property.length;
  } else {
    end = hasComma ? end : property.offset + property.length;
  }
  if (ownLines && !hasComma && index > 0) {
    const previous = siblings[index - 1];
    const comma = text.indexOf(",", previous.offset + previous.length);
    if (comma >= 0 && comma < property.offset) {
      edits.push({ offset: comma, length: 1, content: "" });
    }
  }
  edits.push({ offset: start, length: end - start, content: "" });
  return apply(text, edits);
}

function insertion(
  text: string,
  object: Node,
  key: string,
  value: unknown,
  layout: JsoncLayout,
): Edit {
  const open = object.offset + 1;
  const children = object.children ?? [];
  const inner = text.slice(open, object.offset + object.length - 1);
  const property = (indent: string) => `${JSON.stringify(key)}: ${pretty(value, indent, layout)}`;
  if (children.length > 0 && !inner.includes("\n")) {
    // A one-line object stays one line.
    return {
      offset: children[0].offset,
      length: 0,
      content: `${JSON.stringify(key)}: ${compact(value)}, `,
    };
  }
  const first = children[0];
  const indent =
    first && /^[ \t]*$/.test(text.slice(text.lastIndexOf("\n", first.offset - 1) + 1, first.offset))
      ? lineIndent(text, first.offset)
      : lineIndent(text, object.offset) + layout.indent;
  if (children.length > 0) {
    return { offset: open, length: 0, content: `${layout.eol}${indent}${property(indent)},` };
  }
  const close = inner.includes("\n") ? "" : `${layout.eol}${lineIndent(text, object.offset)}`;
  return { offset: open, length: 0, content: `${layout.eol}${indent}${property(indent)}${close}` };
}

function pretty(value: unknown, indent: string, layout: JsoncLayout): string {
  return JSON.stringify(value, null, layout.indent).replaceAll("\n", layout.eol + indent);
}

function compact(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(compact).join(", ")}]`;
  if (value && typeof value === "object") {
    const entries = Object.entries(value).map(([k, v]) => `${JSON.stringify(k)}: ${compact(v)}`);
    return entries.length ? `{ ${entries.join(", ")} }` : "{}";
  }
  return JSON.stringify(value);
}

function lineIndent(text: string, offset: number): string {
  const lineStart = text.lastIndexOf("\n", offset - 1) + 1;
  return text.slice(lineStart).match(/^[ \t]*/)![0];
}

function skipSpaces(text: string, offset: number): number {
  while (offset < text.length && (text[offset] === " " || text[offset] === "\t")) offset++;
  return offset;
}

function apply(text: string, edits: Edit[]): string {
  return applyEdits(text, edits);
}
