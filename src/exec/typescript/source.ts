/**
 * Turns the model's TypeScript into a module the sandbox runner can import.
 *
 * The body is wrapped in an exported async function so that a top-level `return` works, and
 * top-level `import` declarations are hoisted onto the first line. The transformation keeps
 * every line where it was, so stack traces point at the model's own line numbers without a
 * source map of our own.
 *
 * @module
 */

const KEYWORDS_BEFORE_EXPRESSION = new Set([
  "return",
  "typeof",
  "instanceof",
  "in",
  "of",
  "new",
  "delete",
  "void",
  "throw",
  "case",
  "do",
  "else",
  "yield",
  "await",
]);

const DECLARATION_AFTER_EXPORT =
  /^export\s+(?=(?:const|let|var|function|async|class|interface|type|enum|abstract|declare)\b)/;

/** A `[start, end)` range of source text. */
export type Range = [number, number];

function isIdentifierChar(ch: string | undefined): boolean {
  return ch !== undefined && /[A-Za-z0-9_$\u0080-\uffff]/.test(ch);
}

/** A module the code names in an import: a declaration's, or a dynamic `import()`'s literal. */
export interface ModuleReference {
  /** The specifier as written (`npm:csv-parse@7.0.3`, `./x.ts`). */
  specifier: string;
  /** Where it starts in the code. */
  at: number;
}

/** What {@linkcode scanTopLevel} finds. */
export interface TopLevel {
  /** Top-level import declarations. */
  imports: Range[];
  /** The `export ` keywords of top-level declarations. */
  exports: Range[];
  /**
   * The specifiers of every import declaration and of every `import()` whose argument is a
   * string literal, at any depth; a computed `import(url)` has none to find.
   */
  modules: ModuleReference[];
}

/**
 * Finds the top-level `import` declarations, the `export` keywords that start top-level
 * declarations, and the modules the code imports by name.
 *
 * @param code TypeScript source.
 * @returns The ranges of import declarations and of `export ` keywords, and the module
 *   specifiers, in source order.
 */
export function scanTopLevel(code: string): TopLevel {
  const imports: Range[] = [];
  const exports: Range[] = [];
  const modules: ModuleReference[] = [];
  // Each entry is the brace depth at which a template literal's `${` was opened.
  const templateStack: number[] = [];
  let depth = 0;
  // Whether a `/` at this point would start a regular expression literal.
  let regexAllowed = true;
  // Whether the scanner is at the start of a statement at depth 0.
  let statementStart = true;
  let i = 0;
  const n = code.length;

  const skipString = (quote: string): void => {
    i++;
    while (i < n && code[i] !== quote) {
      if (code[i] === "\\") i++;
      else if (code[i] === "\n") break;
      i++;
    }
    i++;
  };
  // Scans template text from i (just after ` or }) to the closing ` or to a `${`.
  const skipTemplate = (): void => {
    while (i < n) {
      const ch = code[i];
      if (ch === "\\") {
        i += 2;
      } else if (ch === "`") {
        i++;
        return;
      } else if (ch === "$" && code[i + 1] === "{") {
        i += 2;
        templateStack.push(depth);
        depth++;
        return;
      } else {
        i++;
      }
    }
  };
  const skipRegex = (): void => {
    i++;
    let inClass = false;
    while (i < n && code[i] !== "\n") {
      const ch = code[i];
      if (ch === "\\") i++;
      else if (ch === "[") inClass = true;
      else if (ch === "]") inClass = false;
      else if (ch === "/" && !inClass) break;
      i++;
    }
    i++;
    while (isIdentifierChar(code[i])) i++;
  };
  const skipTrivia = (from: number): number => {
    let j = from;
    while (j < n) {
      if (/\s/.test(code[j])) j++;
      else if (code.startsWith("//", j)) {
        while (j < n && code[j] !== "\n") j++;
      } else if (code.startsWith("/*", j)) {
        const end = code.indexOf("*/", j + 2);
        j = end < 0 ? n : end + 2;
      } else break;
    }
    return j;
  };
  // The raw text of the string literal that starts at `from`, escapes and all (no specifier that
  // is allowed has one); none for a template that computes its text.
  const literal = (from: number, quote: string): string | undefined => {
    const end = code.indexOf(quote, from + 1);
    const text = end < 0 ? undefined : code.slice(from + 1, end);
    return quote === "`" && text?.includes("${") ? undefined : text;
  };
  // From just after the `import` keyword, returns the end of the declaration.
  const importEnd = (from: number): number => {
    let j = from;
    while (j < n) {
      j = skipTrivia(j);
      const ch = code[j];
      if (ch === '"' || ch === "'") {
        const specifier = literal(j, ch);
        if (specifier !== undefined) modules.push({ specifier, at: j + 1 });
        const save = i;
        i = j;
        skipString(ch);
        j = i;
        i = save;
        let k = skipTrivia(j);
        const attr = /^(with|assert)\s*\{/.exec(code.slice(k, k + 16));
        if (attr) {
          const close = code.indexOf("}", k);
          j = close < 0 ? n : close + 1;
          k = skipTrivia(j);
        }
        return code[k] === ";" ? k + 1 : j;
      }
      if (ch === ";" || ch === undefined) return j;
      j++;
    }
    return n;
  };

  while (i < n) {
    const ch = code[i];
    if (ch === "\n" || ch === " " || ch === "\t" || ch === "\r") {
      i++;
      continue;
    }
    if (ch === "/" && code[i + 1] === "/") {
      while (i < n && code[i] !== "\n") i++;
      continue;
    }
    if (ch === "/" && code[i + 1] === "*") {
      const end = code.indexOf("*/", i + 2);
      i = end < 0 ? n : end + 2;
      continue;
    }
    if (ch === '"' || ch === "'") {
      skipString(ch);
      regexAllowed = false;
      statementStart = false;
      continue;
    }
    if (ch === "`") {
      i++;
      skipTemplate();
      regexAllowed = false;
      statementStart = false;
      continue;
    }
    if (ch === "/" && regexAllowed) {
      skipRegex();
      regexAllowed = false;
      statementStart = false;
      continue;
    }
    if (isIdentifierChar(ch)) {
      const start = i;
      while (i < n && isIdentifierChar(code[i])) i++;
      const word = code.slice(start, i);
      if (word === "import" && code[start - 1] !== ".") {
        const open = skipTrivia(i);
        if (code[open] === "(") {
          const arg = skipTrivia(open + 1);
          const quote = code[arg];
          const specifier = quote === '"' || quote === "'" || quote === "`"
            ? literal(arg, quote)
            : undefined;
          // Only the literal as the whole argument: `import("file://" + path)` is computed.
          const after = specifier === undefined ? "" : code[skipTrivia(arg + specifier.length + 2)];
          if (after === ")" || after === ",") modules.push({ specifier: specifier!, at: arg + 1 });
        }
      }
      if (depth === 0 && statementStart && word === "import") {
        const next = code[skipTrivia(i)];
        if (next !== "(" && next !== ".") {
          const end = importEnd(i);
          imports.push([start, end]);
          i = end;
          regexAllowed = true;
          statementStart = true;
          continue;
        }
      }
      if (depth === 0 && statementStart && word === "export") {
        const match = DECLARATION_AFTER_EXPORT.exec(code.slice(start, start + 40));
        if (match) exports.push([start, start + match[0].length]);
      }
      regexAllowed = KEYWORDS_BEFORE_EXPRESSION.has(word);
      statementStart = false;
      continue;
    }
    if (ch === "{" || ch === "(" || ch === "[") {
      depth++;
    } else if (ch === "}" || ch === ")" || ch === "]") {
      depth = Math.max(0, depth - 1);
      if (ch === "}" && templateStack.length > 0 && templateStack.at(-1) === depth) {
        templateStack.pop();
        i++;
        skipTemplate();
        regexAllowed = false;
        statementStart = false;
        continue;
      }
    }
    i++;
    regexAllowed = !(ch === ")" || ch === "]" || ch === "}");
    statementStart = depth === 0 && (ch === ";" || ch === "}");
  }
  return { imports, exports, modules };
}

function blank(text: string): string {
  return text.replace(/[^\n]/g, " ");
}

/** The module the runner imports, and how far its lines are shifted from the model's code. */
export interface WrappedSource {
  /** Module source whose default export runs the code and resolves to its `return` value. */
  source: string;
  /** Lines added above the model's first line; subtract it from a line number in a stack trace. */
  lineOffset: number;
}

/** Options of {@linkcode wrapTypescript}. */
export interface WrapOptions {
  /** The default export's parameters, as source text (`args, skills` for a skill's body). */
  params?: string;
}

/**
 * Wraps user TypeScript as `export default async function` with its imports hoisted above it.
 * Hoisted imports are blanked where they stood, so every other line keeps its column and is
 * shifted by exactly `lineOffset`.
 *
 * @param code The model's TypeScript.
 * @param options `params`: the default export's parameter list (a skill's body gets
 * `args, skills`); none by default.
 * @returns The module source and its line offset.
 * @example
 * ```ts
 * const { source, lineOffset } = wrapTypescript('import x from "../x.ts";\nreturn x;');
 * // source: 'import x from "../x.ts";\nexport default async function () {\n                       \nreturn x;\n}\n'
 * // lineOffset: 2
 * ```
 */
export function wrapTypescript(code: string, options: WrapOptions = {}): WrappedSource {
  const { imports, exports } = scanTopLevel(code);
  const cuts = [
    ...imports.map((range) => ({ range, hoist: true })),
    ...exports.map((range) => ({ range, hoist: false })),
  ].sort((a, b) => a.range[0] - b.range[0]);
  let header = "";
  let body = "";
  let last = 0;
  for (const { range: [start, end], hoist } of cuts) {
    const text = code.slice(start, end);
    body += code.slice(last, start) + blank(text);
    if (hoist) header += `${text}\n`;
    last = end;
  }
  body += code.slice(last);
  header += `export default async function (${options.params ?? ""}) {\n`;
  const lineOffset = header.split("\n").length - 1;
  return { source: `${header}${body}\n}\n`, lineOffset };
}
