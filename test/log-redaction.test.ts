// A full run's log, searched for secrets: no API key, access token or file_data may appear, even
// when requests fail (bad key, malformed header, invalid bodies).
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createLogger } from '../src/log.ts';
import { call, seedAccount, tokenFor } from './support/client.ts';
import { eventually, LogCapture, startService } from './support/harness.ts';
import { makePdfBase64 } from './support/pdf.ts';

describe('log redaction', () => {
  let s: Awaited<ReturnType<typeof startService>>;
  before(async () => {
    s = await startService({ env: { LOG_LEVEL: 'trace' } });
  });
  after(async () => {
    await s.dropAll();
  });

  it('never writes keys, tokens or document content', async () => {
    const seed = await seedAccount(s);
    const token = await tokenFor(s.url, seed.api_key);
    const file_data = await makePdfBase64(1);
    const sent = await call(s.url, 'POST', '/v1/faxes/send', {
      token,
      body: { fax_number: '+15551230000', fax_data: [{ file_name: 'x.pdf', file_data }] },
    });
    assert.equal(sent.http, 200);
    await eventually(async () => {
      const r = await call(s.url, 'GET', `/v1/faxes/${sent.body.data.job_id}`, { token });
      return r.body.data?.state === 'delivered';
    });
    // Failures too: the key as a Bearer token, a malformed header, a wrong key, an invalid body.
    assert.equal(
      (await call(s.url, 'GET', `/v1/faxes/${sent.body.data.job_id}`, { token: seed.api_key })).http,
      401,
    );
    assert.equal(
      (await call(s.url, 'GET', '/v1/faxes/x', { headers: { authorization: `Token ${token}` } })).http,
      401,
    );
    assert.equal(
      (await call(s.url, 'POST', '/v1/auth', { body: { api_secret_key: seed.api_key + 'x' } })).http,
      401,
    );
    assert.equal(
      (
        await call(s.url, 'POST', '/v1/faxes/send', {
          token,
          body: { fax_number: 'nope', fax_data: [{ file_name: 'x.pdf', file_data }] },
        })
      ).http,
      422,
    );

    const text = s.logs.text;
    assert.ok(s.logs.lines.length > 10, 'the run was logged');
    assert.ok(!text.includes(seed.api_key), 'API key in log');
    assert.ok(!text.includes(token), 'access token in log');
    assert.ok(!text.includes(file_data.slice(0, 64)), 'file_data in log');
    assert.ok(!/Bearer\s+fxl_/.test(text), 'Authorization header in log');
  });

  it('the logger itself censors secret fields wherever they are logged', () => {
    const cap = new LogCapture();
    const log = createLogger('info', cap);
    log.info(
      {
        api_key: 'fxl_key_SECRET1',
        body: { api_secret_key: 'fxl_key_SECRET2', fax_data: [{ file_data: 'JVBERi0xLjQKSECRET3' }] },
        req: { headers: { authorization: 'Bearer fxl_at_SECRET4' } },
        access_token: 'fxl_at_SECRET5',
      },
      'probe',
    );
    assert.equal(cap.lines.length, 1);
    assert.doesNotMatch(cap.text, /SECRET/);
    assert.match(cap.text, /\[redacted\]/);
  });
});
