import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

// Recognisable prefixes so secret scanners can find a leaked key or token.
export const API_KEY_PREFIX = 'fxl_key_';
export const TOKEN_PREFIX = 'fxl_at_';

/** 32 random bytes (256 bits), base64url. */
function secret(): string {
  return randomBytes(32).toString('base64url');
}

export function newApiKey(): string {
  return API_KEY_PREFIX + secret();
}

export function newAccessToken(): string {
  return TOKEN_PREFIX + secret();
}

/**
 * SHA-256 of the whole secret. A slow password hash is not needed: the secrets carry 256 bits of
 * entropy, so a leaked hash cannot be reversed by guessing; only the hash is ever stored.
 */
export function hashSecret(s: string): Buffer {
  return createHash('sha256').update(s, 'utf8').digest();
}

export function sameHash(a: Buffer, b: Buffer): boolean {
  return a.length === b.length && timingSafeEqual(a, b);
}

/** What an operator may see of a key: its prefix and first characters. */
export function displayPrefix(key: string): string {
  return key.slice(0, API_KEY_PREFIX.length + 6);
}
