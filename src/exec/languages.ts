/**
 * The languages this server runs, one {@linkcode LanguageRuntime} each: the one module that
 * names them, so that the executor holds a runtime per language and knows neither.
 *
 * @module
 */
import type { SkillLanguage } from "../skills/store.ts";
import { PythonRuntime } from "./python/runtime.ts";
import type { LanguageRuntime, RuntimeContext } from "./runtime.ts";
import { TypeScriptRuntime } from "./typescript/runtime.ts";

/**
 * Starts the runtime of every language.
 *
 * @param context The executor's settings, locations, log, shutdown and reaper.
 * @param options Whether to fill the warm pools now (`prepare` does not).
 * @returns One runtime per language.
 */
export async function startRuntimes(
  context: RuntimeContext,
  options: { warm: boolean },
): Promise<Record<SkillLanguage, LanguageRuntime>> {
  return {
    typescript: await TypeScriptRuntime.create(context, options),
    python: await PythonRuntime.create(context, options),
  };
}
