// The /v1/auth failure limiter without a server: allowance, refill, address grouping, bounded memory.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { addressKey, FailureLimiter } from '../src/auth/failures.ts';
import { ManualClock } from '../src/clock.ts';

describe('FailureLimiter', () => {
  it('allows `limit` failures, then asks to wait until one refills', () => {
    const clock = new ManualClock(0);
    const l = new FailureLimiter({ limit: 3, windowSeconds: 30, clock });
    for (let i = 0; i < 3; i++) {
      assert.equal(l.retryAfter('a'), 0);
      l.fail('a');
    }
    assert.equal(l.retryAfter('a'), 10);
    assert.equal(l.retryAfter('b'), 0, 'keys are independent');
    clock.advance(9_000);
    assert.equal(l.retryAfter('a'), 1);
    clock.advance(1_000);
    assert.equal(l.retryAfter('a'), 0);
  });

  it('holds at most maxEntries keys however many addresses fail', () => {
    const clock = new ManualClock(0);
    const l = new FailureLimiter({ limit: 5, windowSeconds: 300, clock, maxEntries: 1000 });
    for (let i = 0; i < 10_000; i++) l.fail(`k${i}`);
    assert.ok(l.size <= 1000, `${l.size} entries`);
    l.fail('last');
    assert.equal(l.retryAfter('last'), 0, 'a new key still starts with its allowance');
  });
});

describe('addressKey', () => {
  it('keeps IPv4 addresses, unwraps IPv4-mapped IPv6, groups IPv6 by /64', () => {
    assert.equal(addressKey('203.0.113.7'), '203.0.113.7');
    assert.equal(addressKey('::ffff:203.0.113.7'), '203.0.113.7');
    assert.equal(addressKey('2001:db8:1:2:aaaa::1'), '2001:db8:1:2::/64');
    assert.equal(addressKey('2001:db8:1:2:bbbb:cccc:dddd:eeee'), '2001:db8:1:2::/64');
    assert.equal(addressKey('2001:0db8:0001:0002::9'), '2001:db8:1:2::/64');
    assert.equal(addressKey('2001:db8::1'), '2001:db8:0:0::/64');
    assert.equal(addressKey('::1'), '0:0:0:0::/64');
  });
});
