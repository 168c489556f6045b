// Every row of customer-api.md's endpoint table, error table and send rules, plus the decisions
// for what the spec leaves "not shown" (docs/api.md): status code and exact body.
import { contactIds } from '../src/auth/contact-id.ts';
import assert from 'node:assert/strict';
import { simulatedTestNumbers } from '../src/transmission/simulated.ts';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import type { DemoSeed } from '../src/admin/seed.ts';
import { call, seedAccount, tokenFor, type Reply } from './support/client.ts';
import { startService } from './support/harness.ts';
import { makePdfBase64 } from './support/pdf.ts';

const E164 = 'must be an E.164 number: +, a first digit 1-9, then 1 to 14 more digits';

describe('customer API: the spec, row by row', () => {
  let s: Awaited<ReturnType<typeof startService>>;
  let seed: DemoSeed;
  let token: string;
  let pdf: string;
  let owner: pg.Client;
  const doc = () => [{ file_name: 'a.pdf', file_data: pdf }];
  const send = (body: unknown, headers?: Record<string, string>) =>
    call(s.url, 'POST', '/v1/faxes/send', { token, body, ...(headers ? { headers } : {}) });
  const refused = (r: Reply, http: number, message: string) => {
    assert.equal(r.http, http, JSON.stringify(r.body));
    assert.deepEqual(r.body, { status: 0, message });
  };

  before(async () => {
    s = await startService({
      env: { RATE_LIMIT_PER_SECOND: '0', MAX_DOCUMENT_BYTES: '4096', MAX_REQUEST_BYTES: '65536' },
    });
    seed = await seedAccount(s);
    token = await tokenFor(s.url, seed.api_key);
    pdf = await makePdfBase64(1);
    owner = new pg.Client({ connectionString: s.cfg.DATABASE_URL });
    await owner.connect();
  });
  after(async () => {
    await owner.end();
    await s.dropAll();
  });

  describe('POST /v1/auth', () => {
    it('returns the token record with the spec message', async () => {
      const r = await call(s.url, 'POST', '/v1/auth', { body: { api_secret_key: seed.api_key } });
      assert.equal(r.http, 200);
      assert.deepEqual(Object.keys(r.body), ['status', 'message', 'data']);
      assert.equal(r.body.status, 1);
      assert.equal(r.body.message, 'Token Generate Successfully');
      assert.equal(r.body.data.token_type, 'Bearer');
      assert.equal(r.body.data.expires_in, 86400);
      assert.match(r.body.data.access_token, /^fxl_at_[A-Za-z0-9_-]{43}$/);
    });
    it('invalid key → 401 {status 0, "API Secret Key is invalid."}', async () => {
      for (const k of ['fxl_key_nope', 'garbage', seed.api_key + 'x'])
        refused(
          await call(s.url, 'POST', '/v1/auth', { body: { api_secret_key: k } }),
          401,
          'API Secret Key is invalid.',
        );
    });
    it('missing key → 422 naming the field', async () => {
      refused(await call(s.url, 'POST', '/v1/auth', { body: {} }), 422, 'api_secret_key: is required');
    });
  });

  describe('POST /v1/faxes/send', () => {
    it('accepted → 200 {status 1, "Fax processed for sending", data.job_id}', async () => {
      const r = await send({ fax_number: '+15551234567', fax_data: doc() });
      assert.equal(r.http, 200);
      assert.deepEqual(Object.keys(r.body), ['status', 'message', 'data']);
      assert.equal(r.body.status, 1);
      assert.equal(r.body.message, 'Fax processed for sending');
      assert.deepEqual(Object.keys(r.body.data), ['job_id']);
    });

    it('accepts file_url documents and every optional property, stored on the job', async () => {
      const r = await send({
        fax_number: '+442071234567',
        caller_id: seed.numbers[5]!,
        fax_data: [
          { file_name: 'a.pdf', file_url: 'https://example.org/a.pdf' },
          { file_name: 'b.pdf', file_data: pdf },
        ],
        fax_priority: 'high',
        fax_quality: 'hd',
        subject: 'Referral',
        sender_name: 'Dr. A',
        recipient_name: 'Dr. B',
        message: 'Please see attached.',
      });
      assert.equal(r.http, 200);
      const job = (await call(s.url, 'GET', `/v1/faxes/${r.body.data.job_id}`, { token })).body.data;
      assert.equal(job.caller_id, seed.numbers[5]);
      assert.equal(job.fax_priority, 'high');
      assert.equal(job.fax_quality, 'hd');
      assert.deepEqual(job.options, {
        approval_required: false,
        subject: 'Referral',
        message: 'Please see attached.',
        sender_name: 'Dr. A',
        recipient_name: 'Dr. B',
      });
    });

    it('Fax Defaults: caller_id and fax_quality from template_id, else from the default, stored on the job', async () => {
      const viaDefault = await send({ fax_number: '+15551234567', fax_data: doc() });
      let job = (await call(s.url, 'GET', `/v1/faxes/${viaDefault.body.data.job_id}`, { token })).body.data;
      assert.equal(job.caller_id, seed.numbers[0]);
      assert.equal(job.fax_quality, 'standard');
      assert.equal(job.fax_priority, 'regular');
      const viaTemplate = await send({
        fax_number: '+15551234567',
        fax_data: doc(),
        template_id: seed.template_id,
      });
      job = (await call(s.url, 'GET', `/v1/faxes/${viaTemplate.body.data.job_id}`, { token })).body.data;
      assert.equal(job.caller_id, seed.numbers[1]);
      assert.equal(job.fax_quality, 'hd');
      assert.equal(job.template_id, seed.template_id);
      const explicit = await send({
        fax_number: '+15551234567',
        fax_data: doc(),
        template_id: seed.template_id,
        caller_id: seed.numbers[9]!,
        fax_quality: 'low',
      });
      job = (await call(s.url, 'GET', `/v1/faxes/${explicit.body.data.job_id}`, { token })).body.data;
      assert.equal(job.caller_id, seed.numbers[9]);
      assert.equal(job.fax_quality, 'low');
    });

    it('smart_document_id of this account is accepted and stored', async () => {
      const r = await send({
        fax_number: '+15551234567',
        fax_data: doc(),
        smart_document_id: seed.smart_document_id,
      });
      assert.equal(r.http, 200);
      const job = (await call(s.url, 'GET', `/v1/faxes/${r.body.data.job_id}`, { token })).body.data;
      assert.equal(job.smart_document_id, seed.smart_document_id);
    });

    it('scheduled_date → scheduled, listed in the scheduled-fax list with its due time', async () => {
      const due = new Date(Date.now() + 3_600_000).toISOString();
      const r = await send({ fax_number: '+15551234567', fax_data: doc(), scheduled_date: due });
      assert.equal(r.http, 200);
      assert.equal(r.body.message, 'Fax processed for sending');
      const list = await call(s.url, 'GET', '/v1/faxes?state=scheduled', { token });
      const item = list.body.data.find((j: { job_id: string }) => j.job_id === r.body.data.job_id);
      assert.equal(item.state, 'scheduled');
      assert.equal(item.scheduled_date, due);
    });

    const rules: [string, Record<string, unknown>, string][] = [
      ['fax_number missing', { fax_data: 'DOC' }, 'fax_number: is required'],
      ['fax_number not E.164', { fax_number: '5551234567', fax_data: 'DOC' }, `fax_number: ${E164}`],
      ['fax_number leading 0', { fax_number: '+05551234567', fax_data: 'DOC' }, `fax_number: ${E164}`],
      ['fax_number too long', { fax_number: '+1234567890123456', fax_data: 'DOC' }, `fax_number: ${E164}`],
      [
        'caller_id not E.164',
        { fax_number: '+15551234567', caller_id: '+1', fax_data: 'DOC' },
        `caller_id: ${E164}`,
      ],
      ['fax_data missing', { fax_number: '+15551234567' }, 'fax_data: is required'],
      [
        'fax_data empty',
        { fax_number: '+15551234567', fax_data: [] },
        'fax_data: must have at least 1 document',
      ],
      [
        'file_name missing',
        { fax_number: '+15551234567', fax_data: [{ file_url: 'https://x.org/a.pdf' }] },
        'fax_data[0].file_name: is required',
      ],
      [
        'both file_url and file_data',
        {
          fax_number: '+15551234567',
          fax_data: [{ file_name: 'a', file_url: 'https://x.org/a', file_data: 'QQ==' }],
        },
        'fax_data[0]: give either file_url or file_data, not both',
      ],
      [
        'neither file_url nor file_data',
        { fax_number: '+15551234567', fax_data: [{ file_name: 'a' }] },
        'fax_data[0]: one of file_url or file_data is required',
      ],
      [
        'file_url not http(s)',
        { fax_number: '+15551234567', fax_data: [{ file_name: 'a', file_url: 'ftp://x.org/a.pdf' }] },
        'fax_data[0].file_url: must be an http or https URL',
      ],
      [
        'template_id with smart_document_id',
        { fax_number: '+15551234567', fax_data: 'DOC', template_id: 'TPL', smart_document_id: 'SMART' },
        'template_id and smart_document_id cannot be combined',
      ],
      [
        'fax_priority other',
        { fax_number: '+15551234567', fax_data: 'DOC', fax_priority: 'urgent' },
        "fax_priority: must be 'high' or 'regular'",
      ],
      [
        'fax_quality other',
        { fax_number: '+15551234567', fax_data: 'DOC', fax_quality: 'ultra' },
        "fax_quality: must be 'low', 'standard' or 'hd'",
      ],
      [
        'scheduled_date not ISO 8601',
        { fax_number: '+15551234567', fax_data: 'DOC', scheduled_date: 'tomorrow' },
        'scheduled_date: must be an ISO 8601 timestamp with a time-zone offset, e.g. 2026-12-01T09:30:00Z',
      ],
      [
        'approval flag not boolean',
        { fax_number: '+15551234567', fax_data: 'DOC', approval_required: 'yes' },
        'approval_required: must be true or false',
      ],
      [
        'template_id of no Fax Default',
        { fax_number: '+15551234567', fax_data: 'DOC', template_id: '00000000-0000-4000-8000-000000000000' },
        'template_id: no Fax Default with this id exists in your account',
      ],
      [
        'smart_document_id of nothing',
        { fax_number: '+15551234567', fax_data: 'DOC', smart_document_id: 'not-an-id' },
        'smart_document_id: no Smart Template with this id exists in your account',
      ],
      [
        'Base64 that does not decode',
        { fax_number: '+15551234567', fax_data: [{ file_name: 'a.pdf', file_data: 'not base64!!' }] },
        'fax_data[0].file_data: is not valid Base64',
      ],
      [
        'Base64 of something else than a PDF, TIFF, JPEG or PNG',
        { fax_number: '+15551234567', fax_data: [{ file_name: 'a.pdf', file_data: 'aGVsbG8gd29ybGQh' }] },
        'fax_data[0].file_data: is not a PDF, TIFF, JPEG or PNG document (recognised by its content, not its name)',
      ],
    ];
    for (const [name, body, message] of rules) {
      it(`${name} → 422 "${message}"`, async () => {
        const b = JSON.parse(
          JSON.stringify(body)
            .replace('"DOC"', JSON.stringify(doc()))
            .replace('"TPL"', JSON.stringify(seed.template_id))
            .replace('"SMART"', JSON.stringify(seed.smart_document_id)),
        );
        refused(await send(b), 422, message);
      });
    }

    it('a document over MAX_DOCUMENT_BYTES → 413 naming it', async () => {
      const big = Buffer.concat([Buffer.from('%PDF-1.4\n'), Buffer.alloc(5000, 32)]).toString('base64');
      refused(
        await send({ fax_number: '+15551234567', fax_data: [{ file_name: 'big.pdf', file_data: big }] }),
        413,
        'fax_data[0].file_data: document is larger than 4096 bytes',
      );
    });

    it('nothing refused was recorded', async () => {
      const n = await owner.query(`SELECT count(*)::int AS n FROM fax_jobs WHERE fax_number = '5551234567'`);
      assert.equal(n.rows[0].n, 0);
    });
  });

  describe('POST /v1/faxes/forward', () => {
    it('source found → 200 with a new job_id reusing the documents; caller_id = default fax_as', async () => {
      const src = await send({ fax_number: '+15551234567', fax_data: doc(), template_id: seed.template_id });
      const r = await call(s.url, 'POST', '/v1/faxes/forward', {
        token,
        body: { job_id: src.body.data.job_id, fax_number: '+15559876543' },
      });
      assert.equal(r.http, 200);
      assert.equal(r.body.status, 1);
      assert.equal(r.body.message, 'Fax processed for sending');
      assert.notEqual(r.body.data.job_id, src.body.data.job_id);
      const job = (await call(s.url, 'GET', `/v1/faxes/${r.body.data.job_id}`, { token })).body.data;
      assert.equal(job.kind, 'forward');
      assert.equal(job.source_job_id, src.body.data.job_id);
      assert.equal(job.fax_number, '+15559876543');
      assert.equal(job.caller_id, seed.numbers[0], "the account default's fax_as, not the source's");
      const docs = await owner.query('SELECT count(*)::int AS n FROM fax_documents WHERE job_id = $1', [
        r.body.data.job_id,
      ]);
      assert.equal(docs.rows[0].n, 0, 'no re-upload: documents stay on the source job');
      const withCaller = await call(s.url, 'POST', '/v1/faxes/forward', {
        token,
        body: { job_id: src.body.data.job_id, fax_number: '+15559876543', caller_id: seed.numbers[7]! },
      });
      const j2 = (await call(s.url, 'GET', `/v1/faxes/${withCaller.body.data.job_id}`, { token })).body.data;
      assert.equal(j2.caller_id, seed.numbers[7]);
    });
    it('source not found → 404 "Fax Not Found"', async () => {
      for (const id of ['00000000-0000-4000-8000-000000000000', 'nope'])
        refused(
          await call(s.url, 'POST', '/v1/faxes/forward', {
            token,
            body: { job_id: id, fax_number: '+15551234567' },
          }),
          404,
          'Fax Not Found',
        );
    });
    it('validation → 422 naming the field', async () => {
      refused(
        await call(s.url, 'POST', '/v1/faxes/forward', { token, body: { fax_number: '+15551234567' } }),
        422,
        'job_id: is required',
      );
      refused(
        await call(s.url, 'POST', '/v1/faxes/forward', { token, body: { job_id: 'x', fax_number: '123' } }),
        422,
        `fax_number: ${E164}`,
      );
    });
  });

  describe('POST /v1/faxes/cancel-schedule', () => {
    it('scheduled → 200 {status 1, "Scheduled fax cancelled successfully"}, no data; gone from the list', async () => {
      const due = new Date(Date.now() + 3_600_000).toISOString();
      const r = await send({ fax_number: '+15551234567', fax_data: doc(), scheduled_date: due });
      const c = await call(s.url, 'POST', '/v1/faxes/cancel-schedule', {
        token,
        body: { job_id: r.body.data.job_id },
      });
      assert.equal(c.http, 200);
      assert.deepEqual(c.body, { status: 1, message: 'Scheduled fax cancelled successfully' });
      const list = await call(s.url, 'GET', '/v1/faxes?state=scheduled', { token });
      assert.ok(!list.body.data.some((j: { job_id: string }) => j.job_id === r.body.data.job_id));
    });
    it('not found → 404 "Fax not found"', async () => {
      refused(
        await call(s.url, 'POST', '/v1/faxes/cancel-schedule', {
          token,
          body: { job_id: '00000000-0000-4000-8000-000000000000' },
        }),
        404,
        'Fax not found',
      );
    });
    it('job_id missing → 422', async () => {
      refused(
        await call(s.url, 'POST', '/v1/faxes/cancel-schedule', { token, body: {} }),
        422,
        'job_id: is required',
      );
    });
  });

  describe('POST /v1/contacts/delete', () => {
    it('found → 200 exact body; deleting twice → 422 "Contact not found"', async () => {
      const id = seed.contact_ids[0]!;
      const dbId = (await contactIds(owner)).decode(id);
      assert.ok(dbId && (await owner.query('SELECT 1 FROM contacts WHERE id = $1', [dbId])).rowCount === 1);
      const r = await call(s.url, 'POST', '/v1/contacts/delete', { token, body: { id } });
      assert.equal(r.http, 200);
      assert.deepEqual(r.body, { status: 1, message: 'Contact has been deleted successfully.' });
      const gone = await owner.query('SELECT 1 FROM contacts WHERE id = $1', [dbId]);
      assert.equal(gone.rowCount, 0, 'permanently deleted');
      refused(
        await call(s.url, 'POST', '/v1/contacts/delete', { token, body: { id } }),
        422,
        'Contact not found',
      );
    });
    it('id missing → 422 "The id field is required."', async () => {
      for (const body of [{}, { id: '' }, { id: null }])
        refused(
          await call(s.url, 'POST', '/v1/contacts/delete', { token, body }),
          422,
          'The id field is required.',
        );
    });
    it('ids are encrypted: 32 opaque characters, not the database UUID', async () => {
      const codec = await contactIds(owner);
      const rows = await owner.query<{ id: string }>('SELECT id FROM contacts WHERE account_id = $1', [
        seed.account_id,
      ]);
      for (const id of seed.contact_ids.slice(1)) {
        assert.match(id, /^[A-Za-z0-9_-]{32}$/);
        assert.ok(!rows.rows.some((r) => id.includes(r.id.replace(/-/g, '').slice(0, 8))));
        assert.ok(rows.rows.some((r) => r.id === codec.decode(id)));
      }
    });
    it('unknown, raw-UUID or altered id → 422 "Contact not found", and nothing is deleted', async () => {
      const real = seed.contact_ids[1]!;
      const flip = (i: number) => real.slice(0, i) + (real[i] === 'A' ? 'B' : 'A') + real.slice(i + 1);
      const dbId = (await contactIds(owner)).decode(real)!;
      for (const id of ['00000000-0000-4000-8000-000000000000', dbId, 'abc', flip(0), flip(20), flip(31)])
        refused(
          await call(s.url, 'POST', '/v1/contacts/delete', { token, body: { id } }),
          422,
          'Contact not found',
        );
      assert.equal((await owner.query('SELECT 1 FROM contacts WHERE id = $1', [dbId])).rowCount, 1);
    });
    it('id of the wrong type → 422', async () => {
      refused(
        await call(s.url, 'POST', '/v1/contacts/delete', { token, body: { id: 7 } }),
        422,
        'The id field must be a string.',
      );
    });
  });

  describe('e-sign', () => {
    it('GET a template field → 200 with the field', async () => {
      const [f1] = seed.esign_field_ids;
      const r = await call(s.url, 'GET', `/v1/esign_templates/${seed.esign_template_id}/fields/${f1}`, {
        token,
      });
      assert.equal(r.http, 200);
      assert.equal(r.body.status, 1);
      assert.equal(r.body.message, 'Template field retrieved successfully');
      assert.equal(r.body.data.id, f1);
      assert.equal(r.body.data.template_id, seed.esign_template_id);
      assert.equal(r.body.data.name, 'patient_signature');
      assert.equal(r.body.data.field_type, 'signature');
    });
    it('GET a field of another template, or unknown → 404 "Template field not found"', async () => {
      const [f1] = seed.esign_field_ids;
      refused(
        await call(s.url, 'GET', `/v1/esign_templates/00000000-0000-4000-8000-000000000000/fields/${f1}`, {
          token,
        }),
        404,
        'Template field not found',
      );
      refused(
        await call(s.url, 'GET', `/v1/esign_templates/${seed.esign_template_id}/fields/x`, { token }),
        404,
        'Template field not found',
      );
    });
    it('GET field rules → 200 with the rules; unknown template → 404', async () => {
      const r = await call(s.url, 'GET', `/v1/esign_templates/${seed.esign_template_id}/field_rule`, {
        token,
      });
      assert.equal(r.http, 200);
      assert.equal(r.body.message, 'Template field rules retrieved successfully');
      assert.deepEqual(
        r.body.data.map((x: { id: string }) => x.id).sort(),
        [...seed.esign_field_rule_ids].sort(),
      );
      refused(
        await call(s.url, 'GET', '/v1/esign_templates/00000000-0000-4000-8000-000000000000/field_rule', {
          token,
        }),
        404,
        'Template not found',
      );
    });
    it('DELETE a field rule → 200; twice → 404 "Template field rule not found"', async () => {
      const rule = seed.esign_field_rule_ids[0]!;
      const path = `/v1/esign_templates/${seed.esign_template_id}/field_rule/${rule}`;
      const r = await call(s.url, 'DELETE', path, { token });
      assert.equal(r.http, 200);
      assert.deepEqual(r.body, { status: 1, message: 'Template field rule has been deleted successfully.' });
      refused(await call(s.url, 'DELETE', path, { token }), 404, 'Template field rule not found');
      const rules = await call(s.url, 'GET', `/v1/esign_templates/${seed.esign_template_id}/field_rule`, {
        token,
      });
      assert.deepEqual(
        rules.body.data.map((x: { id: string }) => x.id),
        [seed.esign_field_rule_ids[1]],
      );
    });
    it('GET a document theme → 200; unknown document → 404; no theme → 404', async () => {
      const r = await call(s.url, 'GET', `/v1/esign_documents/${seed.esign_document_id}/theme`, { token });
      assert.equal(r.http, 200);
      assert.equal(r.body.message, 'Document theme retrieved successfully');
      assert.equal(r.body.data.document_id, seed.esign_document_id);
      assert.equal(r.body.data.primary_color, '#1f4e79');
      assert.equal(r.body.data.font_family, 'Helvetica');
      refused(
        await call(s.url, 'GET', '/v1/esign_documents/00000000-0000-4000-8000-000000000000/theme', { token }),
        404,
        'Document not found',
      );
      await owner.query('DELETE FROM esign_document_themes WHERE document_id = $1', [seed.esign_document_id]);
      refused(
        await call(s.url, 'GET', `/v1/esign_documents/${seed.esign_document_id}/theme`, { token }),
        404,
        'Document theme not found',
      );
    });
  });

  describe('what the spec leaves "not shown" (decisions)', () => {
    it('malformed JSON → 400', async () => {
      refused(
        await call(s.url, 'POST', '/v1/faxes/send', { token, raw: '{"fax_number": ' }),
        400,
        'Request body is not valid JSON',
      );
    });
    it('a JSON body that is not an object → 400', async () => {
      refused(
        await call(s.url, 'POST', '/v1/faxes/send', { token, raw: '[1,2]' }),
        400,
        'Request body must be a JSON object',
      );
    });
    it('wrong Content-Type → 415', async () => {
      refused(
        await call(s.url, 'POST', '/v1/faxes/send', {
          token,
          raw: 'fax_number=1',
          headers: { 'content-type': 'application/x-www-form-urlencoded' },
        }),
        415,
        'Content-Type must be application/json',
      );
    });
    it('body over MAX_REQUEST_BYTES → 413', async () => {
      const r = await call(s.url, 'POST', '/v1/faxes/send', {
        token,
        body: {
          fax_number: '+15551234567',
          fax_data: [{ file_name: 'a.pdf', file_data: 'A'.repeat(70_000) }],
        },
      });
      refused(r, 413, 'Request body is too large');
    });
    it('unknown route → 404 in the envelope', async () => {
      refused(await call(s.url, 'GET', '/v1/nope', { token }), 404, 'No such endpoint: GET /v1/nope');
    });
    it('method not allowed → 405 with Allow', async () => {
      const r = await call(s.url, 'GET', '/v1/faxes/send', { token });
      // GET /v1/faxes/:job_id matches this path: "send" is not a job id, so it is a missing fax.
      refused(r, 404, 'Fax not found');
      const d = await call(s.url, 'PUT', '/v1/auth', { token, body: {} });
      refused(d, 405, 'Method PUT is not allowed on /v1/auth; use POST');
      assert.equal(d.headers.get('allow'), 'POST');
      // GET and PATCH /v1/contacts/{id} match /v1/contacts/delete too ("delete" is a missing contact).
      const c = await call(s.url, 'PUT', '/v1/contacts/delete', { token, body: {} });
      refused(c, 405, 'Method PUT is not allowed on /v1/contacts/delete; use GET or PATCH or POST');
      assert.equal(c.headers.get('allow'), 'GET, PATCH, POST');
    });
    it('success HTTP status of auth, send, forward and cancel-schedule is 200', async () => {
      // Asserted in the rows above; the envelope's status 1 is what carries success.
      const r = await send({ fax_number: '+15551234567', fax_data: doc() });
      assert.equal(r.http, 200);
    });
  });

  describe('OpenAPI', () => {
    it('serves 3.1 with every endpoint and its error responses, from the zod schemas', async () => {
      const r = await call(s.url, 'GET', '/openapi.json');
      assert.equal(r.http, 200);
      const doc = r.body as unknown as {
        openapi: string;
        paths: Record<string, Record<string, { responses: Record<string, unknown>; requestBody?: any }>>;
      };
      assert.equal(doc.openapi, '3.1.0');
      // The simulated line's test numbers are documented where integrators look: on the send operation.
      const sendDescription = (doc.paths['/v1/faxes/send']?.post as { description?: string } | undefined)
        ?.description;
      for (const t of simulatedTestNumbers)
        assert.ok(sendDescription?.includes(t.number), `${t.number} in the description`);
      const expected: [string, string, string[]][] = [
        ['/v1/auth', 'post', ['200', '401', '422', '400', '415', '413']],
        ['/v1/faxes/send', 'post', ['200', '401', '422', '413', '429', '503']],
        ['/v1/faxes/forward', 'post', ['200', '401', '404', '422', '429']],
        ['/v1/faxes/cancel-schedule', 'post', ['200', '401', '404', '409', '422']],
        ['/v1/contacts/delete', 'post', ['200', '401', '422']],
        [
          '/v1/esign_templates/{templateId}/field_rule/{templateFieldRuleId}',
          'delete',
          ['200', '401', '404'],
        ],
        ['/v1/esign_templates/{templateId}/fields/{fieldTemplateId}', 'get', ['200', '401', '404']],
        ['/v1/esign_templates/{templateId}/field_rule', 'get', ['200', '401', '404']],
        ['/v1/esign_documents/{documentId}/theme', 'get', ['200', '401', '404']],
        ['/v1/numbers', 'get', ['200', '401', '422', '429']],
        ['/v1/faxes', 'get', ['200', '401', '422']],
        ['/v1/faxes/{job_id}', 'get', ['200', '401', '404']],
        ['/v1/faxes/approve', 'post', ['200', '404', '409']],
        ['/v1/faxes/reject', 'post', ['200', '404', '409']],
      ];
      for (const [path, method, codes] of expected) {
        const op = doc.paths[path]?.[method];
        assert.ok(op, `${method} ${path}`);
        for (const c of [...codes, '404', '405', '500']) assert.ok(op.responses[c], `${method} ${path} ${c}`);
      }
      const sendSchema = doc.paths['/v1/faxes/send']!.post!.requestBody.content['application/json'].schema;
      assert.equal(sendSchema.properties.fax_number.pattern, '^\\+[1-9][0-9]{1,14}$');
      assert.equal(sendSchema.properties.fax_data.minItems, 1);
      // fax_number stays required in the spec's form; a broadcast (issue 21) gives recipients instead.
      assert.deepEqual(sendSchema.required, ['fax_data']);
      assert.deepEqual(
        sendSchema.oneOf.map((f: { required: string[] }) => f.required),
        [['fax_number'], ['recipients']],
      );
      const page = await fetch(s.url + '/docs');
      assert.equal(page.status, 200);
      assert.match(page.headers.get('content-type') ?? '', /text\/html/);
      assert.match(await page.text(), /openapi\.json/);
    });
  });
});
