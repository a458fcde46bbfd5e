/**
 * Python programs with the value they return and what they print, run both by the Python child
 * in process (`py_sandbox_test.ts`) and through the MCP server (`python_e2e_test.ts`), so the two
 * layers are held to the same answers.
 *
 * @module
 */

/** `[code, returnValue, stdout]`: the last expression's value and `print()` captured. */
export const BASIC_PY_CASES: ReadonlyArray<[string, unknown, string]> = [
  ["2 + 2", 4, ""],
  ['x = 5\nprint(f"{x=}")', undefined, "x=5\n"],
  ["import math\nmath.sqrt(16)", 4, ""],
  ["import unicodedata\nunicodedata.name('A')", "LATIN CAPITAL LETTER A", ""],
  ["import statistics\nstatistics.mean([1, 2, 3, 4])", 2.5, ""],
];
