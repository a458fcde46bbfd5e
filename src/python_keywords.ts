/**
 * Python's keywords (`keyword.kwlist`), which every name that Python code must write has to avoid:
 * the parameters and modules of generated wrappers (`src/codegen/`), and the names of skills
 * (`skills.<name>`, `src/skills/`). Builtins are not in it: a parameter may shadow them.
 *
 * @module
 */

/** The keywords, as Python spells them. */
export const PYTHON_KEYWORDS: ReadonlySet<string> = new Set([
  "False",
  "None",
  "True",
  "and",
  "as",
  "assert",
  "async",
  "await",
  "break",
  "class",
  "continue",
  "def",
  "del",
  "elif",
  "else",
  "except",
  "finally",
  "for",
  "from",
  "global",
  "if",
  "import",
  "in",
  "is",
  "lambda",
  "nonlocal",
  "not",
  "or",
  "pass",
  "raise",
  "return",
  "try",
  "while",
  "with",
  "yield",
]);
