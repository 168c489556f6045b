// Label values derived from names that may carry identifiers. A label must come from a small,
// fixed set: an account id in an event's routing key (`<account_id>.fax.delivered`) would create a
// series per account.

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const SAFE = /^[a-z][a-z0-9_.-]{0,48}$/;

/** The kind of an exchange or queue from its prefixed name: `faxline.commands` → `commands`. */
export function nameKind(name: string): string {
  const last = name.split('.').pop() ?? name;
  return SAFE.test(last) ? last : 'other';
}

/** A routing key without identifier segments: `3f2c…-….fax.delivered` → `fax.delivered`. */
export function routingKeyType(key: string): string {
  const kept = key.split('.').filter((seg) => !UUID.test(seg) && !/^\d+$/.test(seg) && seg !== '');
  const t = kept.join('.');
  return SAFE.test(t) ? t : 'other';
}
