// Digest authentication of inbound INVITEs (issue 20): the verifier of src/sip/digest.ts answered by
// the client side of the same file (authorize), our user agent challenging and checking real INVITEs
// from another of our user agents on loopback, and the router's order (source first, then credentials)
// with its refusal causes.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { authorize, DigestVerifier, parseChallenge, type CheckedRequest } from '../src/sip/digest.ts';
import { UserAgent, type IncomingCall } from '../src/sip/ua.ts';
import { InboundRouter, resolveAllowList, type RefusalCause } from '../src/receive/routing.ts';
import { portBlock } from './support/telephony/ports.ts';

const CRED = { realm: 'faxline-test', username: 'carrier-7', password: 'Inbound-Secret-20' };
const URI = 'sip:+15550102@127.0.0.1:5060';

/** The Authorization value our client side sends for the first challenge of `v`. */
function answer(
  v: DigestVerifier,
  o: { password?: string; username?: string; uri?: string; nc?: number; algorithm?: number } = {},
) {
  const challenge = parseChallenge(v.challenges()[o.algorithm ?? 0]!);
  return authorize({
    challenge,
    method: 'INVITE',
    uri: o.uri ?? URI,
    username: o.username ?? CRED.username,
    password: o.password ?? CRED.password,
    nc: o.nc ?? 1,
  }).value;
}

const req = (authorization: string[], callId = 'c1', cseq = '1 INVITE'): CheckedRequest => ({
  method: 'INVITE',
  uri: URI,
  authorization,
  callId,
  cseq,
});

describe('inbound digest authentication: the verifier', () => {
  it('accepts the right answer (SHA-256 and MD5), refuses wrong users, passwords, uris and forged nonces', () => {
    const v = new DigestVerifier(CRED);
    // MD5 first by default (clients that read only the topmost challenge), then SHA-256.
    const [md5, sha] = v.challenges();
    assert.match(md5!, /^Digest realm="faxline-test", nonce="[^"]+", algorithm=MD5, qop="auth"$/);
    assert.match(sha!, /algorithm=SHA-256, qop="auth"$/);
    assert.deepEqual(v.verify(req([answer(v)])), { ok: true });
    assert.deepEqual(v.verify(req([answer(v, { algorithm: 1 })], 'c2')), { ok: true });
    const kind = (a: string) => {
      const r = v.verify(req([a], `c-${Math.random()}`));
      return r.ok ? 'ok' : `${r.kind}: ${r.detail}`;
    };
    assert.equal(kind(answer(v, { password: 'Inbound-Secret-21' })), 'failed: wrong user name or password');
    assert.equal(kind(answer(v, { username: 'carrier-8' })), 'failed: wrong user name or password');
    assert.equal(
      kind(answer(v, { uri: 'sip:+15550103@127.0.0.1:5060' })),
      'failed: the digest uri is not the Request-URI',
    );
    // A nonce of the right shape whose MAC is not ours (one character changed).
    const good = answer(v);
    const forged = good.replace(/nonce="([^"]+)"/, (_m, n: string) => {
      const last = n.at(-1) === 'A' ? 'B' : 'A';
      return `nonce="${n.slice(0, -1)}${last}"`;
    });
    assert.equal(kind(forged), 'failed: a nonce this installation never issued');
    assert.match(
      kind('Digest username="x", realm="faxline-test", nonce="n"'),
      /^failed: credentials without/,
    );
    // Nothing for our realm: missing (challenged), not failed.
    assert.match(kind(good.replace('realm="faxline-test"', 'realm="other"')), /^missing/);
    assert.match(kind('Basic Zm9vOmJhcg=='), /^missing/);
    // SHA-256 alone (SIP_INBOUND_ALGORITHMS=SHA-256): only it is offered, an MD5 answer is refused.
    const strict = new DigestVerifier({ ...CRED, algorithms: ['SHA-256'] });
    assert.equal(strict.challenges().length, 1);
    assert.deepEqual(strict.verify(req([answer(strict)])), { ok: true });
    const md5Answer = answer(strict).replace('algorithm=SHA-256', 'algorithm=MD5');
    assert.deepEqual(strict.verify(req([md5Answer], 'c3')), {
      ok: false,
      kind: 'failed',
      detail: 'algorithm MD5 is not one offered',
    });
    assert.deepEqual(v.verify(req([])), {
      ok: false,
      kind: 'missing',
      detail: 'no credentials for realm "faxline-test"',
    });
  });

  it('an expired nonce is stale; a used one is accepted again only for the same request or a higher count', () => {
    let now = 1_000_000;
    const v = new DigestVerifier({ ...CRED, nonceTtlMs: 30_000, now: () => now });
    const a1 = answer(v);
    assert.deepEqual(v.verify(req([a1], 'call-1', '2 INVITE')), { ok: true });
    // The same INVITE again (a retransmission that became a new transaction, a proxy's next try).
    assert.deepEqual(v.verify(req([a1], 'call-1', '2 INVITE')), { ok: true });
    // The same credentials on another call: a replay.
    const replay = v.verify(req([a1], 'call-2', '2 INVITE'));
    assert.deepEqual(replay, {
      ok: false,
      kind: 'failed',
      detail: 'nonce count 00000001 already used (a replay)',
    });
    // The same nonce with a higher count (RFC 7616 3.3) is fine, and then count 1 is used up.
    const nonce = /nonce="([^"]+)"/.exec(a1)![1]!;
    const c = parseChallenge(`Digest realm="${CRED.realm}", nonce="${nonce}", algorithm=MD5, qop="auth"`);
    const a2 = authorize({ challenge: c, method: 'INVITE', uri: URI, ...CRED, nc: 2 }).value;
    assert.deepEqual(v.verify(req([a2], 'call-3', '1 INVITE')), { ok: true });
    assert.equal(v.verify(req([a1], 'call-1', '2 INVITE')).ok, false, 'count 1 after count 2');
    // 30 s later the nonce is stale (challenged again, stale=true), not wrong.
    const a3 = answer(v);
    now += 30_001;
    assert.deepEqual(v.verify(req([a3], 'call-4')), {
      ok: false,
      kind: 'stale',
      detail: 'the nonce expired',
    });
    assert.match(v.challenges(true)[0]!, /, stale=true$/);
  });

  it('a nonce issued by one process is accepted by another with the same credentials, not with others', () => {
    const a = new DigestVerifier(CRED);
    const b = new DigestVerifier(CRED);
    const other = new DigestVerifier({ ...CRED, password: 'another-installation' });
    const fromA = answer(a);
    assert.deepEqual(b.verify(req([fromA])), { ok: true });
    const r = other.verify(req([answer(a, { password: 'another-installation' })]));
    assert.deepEqual(r, { ok: false, kind: 'failed', detail: 'a nonce this installation never issued' });
  });
});

describe('inbound digest authentication: our user agent', { timeout: 30_000 }, () => {
  it('challenges an INVITE 401, takes the client’s SHA-256 answer (its preference), refuses wrong credentials 403', async () => {
    const base = await portBlock('sip', 4, { tcp: true });
    const seen: { auth: string; header: string | undefined }[] = [];
    const rx = await UserAgent.start({
      host: '127.0.0.1',
      port: base,
      publicAddress: '127.0.0.1',
      inboundAuth: CRED,
      onInvite: (call: IncomingCall) => {
        const auth = call.auth === undefined ? 'off' : call.auth.ok ? 'ok' : call.auth.kind;
        seen.push({
          auth,
          header: call.request.headers.find((h) => h.name.toLowerCase() === 'authorization')?.value,
        });
        if (auth === 'missing' || auth === 'stale') call.challenge();
        else if (auth === 'failed') call.reject(403);
        else call.reject(486); // authorized: a status of its own, so the caller can tell
      },
    });
    const callers: UserAgent[] = [];
    const caller = async (port: number, credentials?: { username: string; password: string }) => {
      const ua = await UserAgent.start({
        host: '127.0.0.1',
        port,
        publicAddress: '127.0.0.1',
        ...(credentials ? { credentials } : {}),
      });
      callers.push(ua);
      return ua.invite({
        requestUri: `sip:+15550102@127.0.0.1:${base}`,
        fromUser: '+15550009999',
        sdp: 'v=0\r\n',
      });
    };
    try {
      const right = await caller(base + 1, { username: CRED.username, password: CRED.password });
      assert.equal(right.status, 486, JSON.stringify(right));
      assert.deepEqual(
        seen.map((s) => s.auth),
        ['missing', 'ok'],
      );
      assert.match(seen[1]!.header ?? '', /algorithm=SHA-256/);
      const wrong = await caller(base + 2, { username: CRED.username, password: 'guessed' });
      assert.equal(wrong.status, 403);
      const none = await caller(base + 3);
      assert.equal(none.status, 401);
      assert.deepEqual(
        seen.map((s) => s.auth),
        ['missing', 'ok', 'missing', 'failed', 'missing'],
      );
    } finally {
      await Promise.all([rx.close(), ...callers.map((c) => c.close())]);
    }
  });
});

describe('inbound digest authentication: the router', () => {
  it('checks the source first (never challenged), then the credentials, each refusal counted by cause', async () => {
    const counted: RefusalCause[] = [];
    const router = new InboundRouter({
      allow: await resolveAllowList('192.0.2.10', ''),
      countryCode: '',
      lines: 4,
      findNumber: async (n) => ({
        numberId: 'n1',
        accountId: 'a1',
        number: n,
        stationId: null,
        receive: true,
      }),
      onRefused: (c) => counted.push(c),
    });
    const call = { requestUser: '+15550102', toUser: '+15550102', source: '192.0.2.10' };
    const outsider = await router.route({ ...call, source: '198.51.100.1', auth: 'missing' });
    assert.deepEqual(!outsider.answer && [outsider.status, outsider.cause], [403, 'source_not_allowed']);
    const missing = await router.route({ ...call, auth: 'missing' });
    assert.deepEqual(!missing.answer && [missing.status, missing.cause], [401, 'auth_required']);
    const stale = await router.route({ ...call, auth: 'stale' });
    assert.deepEqual(!stale.answer && [stale.status, stale.cause], [401, 'auth_required']);
    const wrong = await router.route({ ...call, auth: 'failed' });
    assert.deepEqual(!wrong.answer && [wrong.status, wrong.cause], [403, 'auth_failed']);
    const ok = await router.route({ ...call, auth: 'ok' });
    assert.equal(ok.answer, true);
    const off = await router.route(call);
    assert.equal(off.answer, true, 'no credentials demanded: answered as before');
    assert.deepEqual(counted, ['source_not_allowed', 'auth_required', 'auth_required', 'auth_failed']);
  });
});
