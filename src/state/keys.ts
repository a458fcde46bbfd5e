/**
 * The keys of the shared state, derived with HKDF-SHA256 from one secret (`state.key`, the same
 * on every replica): AES-256-GCM for what is kept at rest, HMAC-SHA256 for the names under which
 * it is looked up, and HMAC-SHA256 for the replicas' requests to each other. Three keys, so that
 * no output of one use (a lookup name, a request's MAC) helps with another.
 *
 * What the store may see: lookup names (truncated HMACs, of no use without the key), sealed
 * blobs, counters and random ids. Never a personal value, a token, a principal's name or a plain
 * hash of any of them: a plain SHA-256 of an email address is found again by hashing guesses.
 *
 * The work is done by `node:crypto` (OpenSSL), synchronously, behind async methods: WebCrypto's
 * promises settle on a thread pool, each a wake-up of the event loop, and on a busy host those
 * wake-ups, not the cryptography, were the cost (a run that resolved ten placeholders spent
 * 0.4 ms a decryption and 1 ms an HMAC waiting for them on this 2-core machine at load 14,
 * against 0.02 ms each done in place; bench/store_cost.ts). The keys are then bytes in this
 * process's memory, where WebCrypto's non-extractable keys were too, from an attacker's view.
 *
 * @module
 */
import { Buffer } from "node:buffer";
import {
  createCipheriv,
  createDecipheriv,
  createHmac,
  hkdfSync,
  timingSafeEqual,
} from "node:crypto";

const encoder = new TextEncoder();
const SALT = encoder.encode("code-executor/state/v1");
/** The first byte of a sealed blob: the layout (and, later, which key) it was sealed with. */
const SEALED_V1 = 1;
const IV_BYTES = 12;
/** 128 bits: lookup names only have to be unique, and short keys keep the store small. */
const INDEX_BYTES = 16;
/** AES-GCM's full tag. */
const TAG_BYTES = 16;

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
  readonly #seal: Buffer;
  readonly #index: Buffer;
  readonly #peer: Buffer;
  /**
   * The HMAC-SHA256 key of parked runs' `requestState` (sign and verify), raw: the same on every
   * replica with the same `state.key`, so that a retry can be checked wherever it lands.
   */
  readonly requestState: Uint8Array<ArrayBuffer>;

  private constructor(seal: Buffer, index: Buffer, peer: Buffer, state: Uint8Array<ArrayBuffer>) {
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
  static derive(secret?: string): Promise<StateKeys> {
    const raw = secret !== undefined
      ? encoder.encode(secret)
      : crypto.getRandomValues(new Uint8Array(32));
    const derive = (info: string) => Buffer.from(hkdfSync("sha256", raw, SALT, info, 32));
    const state = new Uint8Array(hkdfSync("sha256", raw, SALT, "request-state", 32));
    return Promise.resolve(
      new StateKeys(derive("seal"), derive("index"), derive("peer"), state),
    );
  }

  /**
   * Encrypts bytes for the store, bound to where they are kept: a blob moved to another key (or
   * another principal's) does not open there.
   *
   * @param plain What to keep.
   * @param context Where it is kept (its store key, or what names the owner).
   * @returns Version byte, random 96-bit IV, ciphertext and tag (AES-256-GCM). (Random IVs under
   *   one key are safe for about 2^32 seals; a store sees far fewer writes between two changes of
   *   the key.)
   */
  seal(plain: Uint8Array<ArrayBuffer>, context: string): Promise<Uint8Array<ArrayBuffer>> {
    const iv = crypto.getRandomValues(new Uint8Array(IV_BYTES));
    const cipher = createCipheriv("aes-256-gcm", this.#seal, iv);
    cipher.setAAD(encoder.encode(context));
    const body = cipher.update(plain);
    const last = cipher.final();
    const tag = cipher.getAuthTag();
    const out = new Uint8Array(1 + IV_BYTES + body.length + last.length + tag.length);
    out[0] = SEALED_V1;
    out.set(iv, 1);
    out.set(body, 1 + IV_BYTES);
    out.set(last, 1 + IV_BYTES + body.length);
    out.set(tag, 1 + IV_BYTES + body.length + last.length);
    return Promise.resolve(out);
  }

  /**
   * Decrypts what {@linkcode StateKeys.seal} made for the same context.
   *
   * @param sealed The blob from the store.
   * @param context Where it was read from.
   * @returns The bytes, or undefined when the blob does not authenticate (another key, another
   *   context, or altered): callers treat it as absent.
   */
  open(sealed: Uint8Array, context: string): Promise<Uint8Array | undefined> {
    if (sealed.length < 1 + IV_BYTES + TAG_BYTES || sealed[0] !== SEALED_V1) {
      return Promise.resolve(undefined);
    }
    try {
      const decipher = createDecipheriv(
        "aes-256-gcm",
        this.#seal,
        sealed.subarray(1, 1 + IV_BYTES),
      );
      decipher.setAAD(encoder.encode(context));
      decipher.setAuthTag(sealed.subarray(sealed.length - TAG_BYTES));
      const body = decipher.update(sealed.subarray(1 + IV_BYTES, sealed.length - TAG_BYTES));
      const last = decipher.final();
      const out = new Uint8Array(body.length + last.length);
      out.set(body);
      out.set(last, body.length);
      return Promise.resolve(out);
    } catch {
      return Promise.resolve(undefined);
    }
  }

  /**
   * Names a record by what it is about, without revealing it: a keyed HMAC of the parts.
   *
   * @param parts For example `"principal", name` or `"vault", principal, category, value`.
   * @returns 22 base64url characters (128 bits).
   */
  index(...parts: string[]): Promise<string> {
    // JSON keeps the parts apart: ["a", "bc"] and ["ab", "c"] name different records.
    const mac = createHmac("sha256", this.#index).update(JSON.stringify(parts)).digest();
    return Promise.resolve(base64url(mac.subarray(0, INDEX_BYTES)));
  }

  /**
   * Authenticates a request of one replica to another.
   *
   * @param data The canonical text of the request.
   * @returns Its HMAC-SHA256.
   */
  peerSign(data: string): Promise<Uint8Array> {
    return Promise.resolve(new Uint8Array(createHmac("sha256", this.#peer).update(data).digest()));
  }

  /**
   * Checks a replica's request MAC, in constant time.
   *
   * @param data The canonical text of the request as received.
   * @param mac The MAC it carried.
   * @returns Whether another holder of `state.key` made it.
   */
  peerVerify(data: string, mac: Uint8Array<ArrayBuffer>): Promise<boolean> {
    const expected = createHmac("sha256", this.#peer).update(data).digest();
    return Promise.resolve(mac.length === expected.length && timingSafeEqual(mac, expected));
  }
}
