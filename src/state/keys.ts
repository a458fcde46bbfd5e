/**
 * The keys of the shared state, derived with HKDF-SHA256 from one secret (`state.key`, the same
 * on every replica): AES-256-GCM for what is kept at rest, HMAC-SHA256 for the names under which
 * it is looked up, HMAC-SHA256 for the replicas' requests to each other, and HMAC-SHA256 for the
 * `requestState` of parked runs (unless `approvals.stateKey` is set). Four keys, so that no output
 * of one use (a lookup name, a request's MAC, a state a client holds) helps with another.
 *
 * What the store may see: lookup names (truncated HMACs, of no use without the key), sealed
 * blobs, counters and random ids. Never a personal value, a token, a principal's name or a plain
 * hash of any of them: a plain SHA-256 of an email address is found again by hashing guesses.
 *
 * @module
 */

const encoder = new TextEncoder();
const SALT = encoder.encode("code-executor/state/v1");
/** The first byte of a sealed blob: the layout (and, later, which key) it was sealed with. */
const SEALED_V1 = 1;
const IV_BYTES = 12;
/** 128 bits: lookup names only have to be unique, and short keys keep the store small. */
const INDEX_BYTES = 16;

/**
 * Encodes bytes as base64url without padding.
 *
 * @param bytes Any bytes.
 * @returns The text.
 */
export function base64url(bytes: Uint8Array): string {
  let text = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    text += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return btoa(text).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
}

/**
 * Decodes base64url (with or without padding).
 *
 * @param text The text.
 * @returns The bytes.
 * @throws {DOMException} When the text is not base64url.
 */
export function fromBase64url(text: string): Uint8Array<ArrayBuffer> {
  const raw = atob(text.replaceAll("-", "+").replaceAll("_", "/"));
  return Uint8Array.from(raw, (c) => c.charCodeAt(0));
}

/** The keys of the shared state, and what they do. */
export class StateKeys {
  readonly #seal: CryptoKey;
  readonly #index: CryptoKey;
  readonly #peer: CryptoKey;
  /**
   * The HMAC-SHA256 key of parked runs' `requestState` (sign and verify): the same on every
   * replica with the same `state.key`, so that a retry can be checked wherever it lands.
   */
  readonly requestState: CryptoKey;

  private constructor(seal: CryptoKey, index: CryptoKey, peer: CryptoKey, state: CryptoKey) {
    this.#seal = seal;
    this.#index = index;
    this.#peer = peer;
    this.requestState = state;
  }

  /**
   * Derives the keys from a secret.
   *
   * @param secret `state.key`; without it, a random secret of this process (the in-process
   *   store, whose state no other process reads).
   * @returns The keys.
   */
  static async derive(secret?: string): Promise<StateKeys> {
    const raw = secret !== undefined
      ? encoder.encode(secret)
      : crypto.getRandomValues(new Uint8Array(32));
    const master = await crypto.subtle.importKey("raw", raw, "HKDF", false, ["deriveKey"]);
    const derive = (info: string, algorithm: AesKeyGenParams | HmacKeyGenParams) =>
      crypto.subtle.deriveKey(
        { name: "HKDF", hash: "SHA-256", salt: SALT, info: encoder.encode(info) },
        master,
        algorithm,
        false,
        algorithm.name === "AES-GCM" ? ["encrypt", "decrypt"] : ["sign", "verify"],
      );
    const hmac: HmacKeyGenParams = { name: "HMAC", hash: "SHA-256", length: 256 };
    return new StateKeys(
      await derive("seal", { name: "AES-GCM", length: 256 }),
      await derive("index", hmac),
      await derive("peer", hmac),
      await derive("request-state", hmac),
    );
  }

  /**
   * Encrypts bytes for the store, bound to where they are kept: a blob moved to another key (or
   * another principal's) does not open there.
   *
   * @param plain What to keep.
   * @param context Where it is kept (its store key, or what names the owner).
   * @returns Version byte, random 96-bit IV, ciphertext and tag. (Random IVs under one key are
   *   safe for about 2^32 seals; a store sees far fewer writes between two changes of the key.)
   */
  async seal(plain: Uint8Array<ArrayBuffer>, context: string): Promise<Uint8Array<ArrayBuffer>> {
    const iv = crypto.getRandomValues(new Uint8Array(IV_BYTES));
    const sealed = await crypto.subtle.encrypt(
      { name: "AES-GCM", iv, additionalData: encoder.encode(context) },
      this.#seal,
      plain,
    );
    const out = new Uint8Array(1 + IV_BYTES + sealed.byteLength);
    out[0] = SEALED_V1;
    out.set(iv, 1);
    out.set(new Uint8Array(sealed), 1 + IV_BYTES);
    return out;
  }

  /**
   * Decrypts what {@linkcode StateKeys.seal} made for the same context.
   *
   * @param sealed The blob from the store.
   * @param context Where it was read from.
   * @returns The bytes, or undefined when the blob does not authenticate (another key, another
   *   context, or altered): callers treat it as absent.
   */
  async open(sealed: Uint8Array, context: string): Promise<Uint8Array | undefined> {
    if (sealed.length < 1 + IV_BYTES + 16 || sealed[0] !== SEALED_V1) return undefined;
    try {
      return new Uint8Array(
        await crypto.subtle.decrypt(
          {
            name: "AES-GCM",
            iv: sealed.slice(1, 1 + IV_BYTES),
            additionalData: encoder.encode(context),
          },
          this.#seal,
          sealed.slice(1 + IV_BYTES),
        ),
      );
    } catch {
      return undefined;
    }
  }

  /**
   * Names a record by what it is about, without revealing it: a keyed HMAC of the parts.
   *
   * @param parts For example `"principal", name` or `"vault", principal, category, value`.
   * @returns 22 base64url characters (128 bits).
   */
  async index(...parts: string[]): Promise<string> {
    // JSON keeps the parts apart: ["a", "bc"] and ["ab", "c"] name different records.
    const mac = await crypto.subtle.sign(
      "HMAC",
      this.#index,
      encoder.encode(JSON.stringify(parts)),
    );
    return base64url(new Uint8Array(mac, 0, INDEX_BYTES));
  }

  /**
   * Authenticates a request of one replica to another.
   *
   * @param data The canonical text of the request.
   * @returns Its HMAC-SHA256.
   */
  async peerSign(data: string): Promise<Uint8Array> {
    return new Uint8Array(await crypto.subtle.sign("HMAC", this.#peer, encoder.encode(data)));
  }

  /**
   * Checks a replica's request MAC (in constant time, by WebCrypto).
   *
   * @param data The canonical text of the request as received.
   * @param mac The MAC it carried.
   * @returns Whether another holder of `state.key` made it.
   */
  async peerVerify(data: string, mac: Uint8Array<ArrayBuffer>): Promise<boolean> {
    return await crypto.subtle.verify("HMAC", this.#peer, mac, encoder.encode(data));
  }
}
