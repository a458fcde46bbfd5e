/**
 * Who a request runs as. Principals are compared as whole strings everywhere (Python sessions,
 * placeholders, kept outputs, pending approvals, parked runs, skills, admission, the audit log), so
 * the built-in identity and those that HTTP authentication vouches for live in separate
 * namespaces: `local` is stdio's (and that of HTTP without authentication), and every
 * authenticated HTTP principal is `http:<name>`, where `<name>` is the token's name in the tokens
 * file (`default` for `CODE_EXECUTOR_HTTP_TOKEN`) or the OAuth token's `sub`. No tokens-file entry
 * or OAuth subject can therefore be `local`, whatever it is called.
 *
 * @module
 */

/** The principal of stdio and of HTTP without authentication: the machine's own user. */
export const LOCAL_PRINCIPAL = "local";

/** The prefix of every principal that HTTP authentication vouches for. */
const HTTP_PREFIX = "http:";

/**
 * The principal of a name that HTTP authentication vouches for.
 *
 * @param name A tokens-file name, `default`, or an OAuth `sub`.
 * @returns `http:<name>`.
 *
 * @example
 * ```ts
 * httpPrincipal("local"); // "http:local", never the stdio principal
 * ```
 */
export function httpPrincipal(name: string): string {
  return `${HTTP_PREFIX}${name}`;
}

/**
 * Whether a principal is one that HTTP authentication vouched for.
 *
 * @param principal A principal.
 * @returns True for `http:<name>`.
 */
export function isHttpPrincipal(principal: string): boolean {
  return principal.startsWith(HTTP_PREFIX);
}

/**
 * The name the admin knows a principal by (in `skills.admins`, a tokens file, an issuer's
 * accounts): `http:alice` is `alice`; any other principal is its own name.
 *
 * @param principal A principal.
 * @returns Its name.
 */
export function principalName(principal: string): string {
  return isHttpPrincipal(principal) ? principal.slice(HTTP_PREFIX.length) : principal;
}

/**
 * What one principal may hold of a cap that all share: `share` when the admin set one (at most the
 * cap), otherwise half of the cap (at least 1), so that one principal always leaves room for
 * another. `local` is alone in its process (stdio, or HTTP without authentication, where every
 * caller is `local`), so it may use the whole cap.
 *
 * @param principal Who asks.
 * @param cap The cap all principals share.
 * @param share The admin's per-principal setting; 0 for the default.
 * @returns How much of the cap the principal may hold.
 *
 * @example
 * ```ts
 * principalShare("http:alice", 100, 0); // 50
 * principalShare("local", 100, 0); // 100
 * ```
 */
export function principalShare(principal: string, cap: number, share: number): number {
  if (!isHttpPrincipal(principal)) return cap;
  return share > 0 ? Math.min(share, cap) : Math.max(1, Math.floor(cap / 2));
}
