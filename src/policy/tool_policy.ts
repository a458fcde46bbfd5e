/**
 * Which upstream tools an execution may call, how many, and how often: the admin's
 * `tools.allow` / `tools.deny` and the caller's `allowedTools`, intersected; a per-execution cap;
 * a per-server calls-per-minute limit shared by all executions.
 *
 * @module
 */

/**
 * Compiles a tool-name glob: `*` matches any run of characters, `?` one character; everything
 * else is literal. Matching is case-sensitive, as tool names are.
 *
 * @param glob For example `mcp__github__*` or `mcp__*__read_*`.
 * @returns A regular expression anchored at both ends.
 */
export function globToRegExp(glob: string): RegExp {
  const body = [...glob].map((ch) =>
    ch === "*" ? ".*" : ch === "?" ? "." : ch.replace(/[.+^${}()|[\]\\]/g, "\\$&")
  ).join("");
  return new RegExp(`^${body}$`);
}

/** The admin's tool rules. */
export interface ToolRules {
  /** Globs of tools that may be called at all. */
  allow: string[];
  /** Globs of tools that may never be called; deny wins over allow. */
  deny: string[];
}

/** The tool policy of one execution. */
export class ToolPolicy {
  #allow: Array<[string, RegExp]>;
  #deny: Array<[string, RegExp]>;
  #requested: Array<[string, RegExp]> | undefined;

  /**
   * Compiles the admin's globs and the caller's into one policy.
   *
   * @param rules The admin's `tools.allow` and `tools.deny`.
   * @param allowedTools The caller's `allowedTools`; undefined means "whatever the admin allows".
   */
  constructor(rules: ToolRules, allowedTools?: string[]) {
    const compile = (globs: string[]) => globs.map((g) => [g, globToRegExp(g)] as [string, RegExp]);
    this.#allow = compile(rules.allow);
    this.#deny = compile(rules.deny);
    this.#requested = allowedTools ? compile(allowedTools) : undefined;
  }

  /** The caller's allowedTools as given, or undefined. */
  get requested(): string[] | undefined {
    return this.#requested?.map(([glob]) => glob);
  }

  /**
   * Decides whether a tool may be called.
   *
   * @param fullName `mcp__<server>__<tool>`.
   * @returns Undefined when allowed, else a refusal naming the rule and how to change it.
   */
  check(fullName: string): string | undefined {
    const denied = this.#deny.find(([, re]) => re.test(fullName));
    if (denied) {
      return `Cannot call tool "${fullName}": the admin's tools.deny rule "${
        denied[0]
      }" refuses it`;
    }
    if (!this.#allow.some(([, re]) => re.test(fullName))) {
      return `Cannot call tool "${fullName}": it is not in the admin's tools.allow (${
        this.#allow.map(([g]) => g).join(", ") || "empty"
      }); the admin adds it there`;
    }
    if (this.#requested && !this.#requested.some(([, re]) => re.test(fullName))) {
      return `Cannot call tool "${fullName}": it is not in allowedTools (${
        this.#requested.map(([g]) => g).join(", ") || "empty"
      }); add it, or a glob such as "${
        fullName.replace(/^(mcp__.*?__).*$/s, "$1*")
      }", to allowedTools`;
    }
    return undefined;
  }
}

/** A sliding one-minute window of calls per key. */
export class RateLimiter {
  #perMinute: number;
  #calls = new Map<string, number[]>();

  /**
   * Creates a limiter with no calls counted yet.
   *
   * @param perMinute Calls allowed per key per minute; 0 means unlimited.
   */
  constructor(perMinute: number) {
    this.#perMinute = perMinute;
  }

  /**
   * Records a call if the limit allows it.
   *
   * @param key For example the server name.
   * @param now The current time in ms.
   * @returns Undefined when allowed, else the ms until a call would be allowed.
   */
  take(key: string, now = Date.now()): number | undefined {
    if (this.#perMinute <= 0) return undefined;
    const recent = (this.#calls.get(key) ?? []).filter((t) => now - t < 60_000);
    if (recent.length >= this.#perMinute) {
      this.#calls.set(key, recent);
      return 60_000 - (now - recent[0]);
    }
    recent.push(now);
    this.#calls.set(key, recent);
    // Keys are principals or servers: forget those idle for a minute once there are many.
    if (this.#calls.size > 1000) {
      for (const [other, times] of this.#calls) {
        if (now - times[times.length - 1] >= 60_000) this.#calls.delete(other);
      }
    }
    return undefined;
  }
}
