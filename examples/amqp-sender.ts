// A high-volume sender in ~60 lines: publishes one send command to the faxline AMQP intake as its own
// RabbitMQ user, waits for the answer, then prints the fax's events until it is delivered or failed.
//   AMQP_URL=amqp://clinic-a:secret@127.0.0.1:5672 ACCOUNT_ID=<account id> node examples/amqp-sender.ts
import amqp from 'amqplib';
import { randomUUID } from 'node:crypto';

const url = new URL(process.env.AMQP_URL ?? 'amqp://clinic-a:secret@127.0.0.1:5672');
const prefix = process.env.QUEUE_PREFIX ?? 'faxline';
const accountId = process.env.ACCOUNT_ID ?? '';
const user = decodeURIComponent(url.username);

// A one-page PDF, inline (file_url works too: same fields and rules as POST /v1/faxes/send).
const pdf = Buffer.from(
  '%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n2 0 obj<</Type/Pages/Kids[3 0 R]/Count 1>>endobj\n' +
    '3 0 obj<</Type/Page/Parent 2 0 R/MediaBox[0 0 612 792]>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n',
).toString('base64');

const conn = await amqp.connect(url.toString());
const ch = await conn.createConfirmChannel();

// Events of this account only (the broker's topic permissions enforce "only this account").
const events = await ch.assertQueue('', { exclusive: true });
await ch.bindQueue(events.queue, `${prefix}.events`, `${accountId}.#`);

// The answer comes back on RabbitMQ's direct reply-to pseudo-queue.
const answer = new Promise<{ status: number; message: string; data?: { job_id: string } }>((resolve) => {
  void ch.consume('amq.rabbitmq.reply-to', (m) => m && resolve(JSON.parse(m.content.toString())), {
    noAck: true,
  });
});

const commandId = randomUUID(); // keep it: republishing with the same id never makes a second fax
const command = { fax_number: '+15551234567', fax_data: [{ file_name: 'hello.pdf', file_data: pdf }] };
ch.publish(`${prefix}.intake`, 'send', Buffer.from(JSON.stringify(command)), {
  userId: user, // required; the broker refuses it unless it is the user you connected as
  messageId: commandId,
  correlationId: commandId,
  replyTo: 'amq.rabbitmq.reply-to',
  contentType: 'application/json',
  persistent: true,
  mandatory: true,
});
await ch.waitForConfirms();

const a = await answer;
console.log('answer:', JSON.stringify(a));
if (a.status !== 1 || !a.data) process.exit(1);
const jobId = a.data.job_id;

await new Promise<void>((resolve) => {
  void ch.consume(
    events.queue,
    (m) => {
      if (!m) return;
      const e = JSON.parse(m.content.toString()) as { type: string; job_id: string; details: unknown };
      if (e.job_id !== jobId) return;
      console.log('event:', e.type, JSON.stringify(e.details));
      if (['fax.delivered', 'fax.failed', 'fax.cancelled', 'fax.outcome_unknown'].includes(e.type)) resolve();
    },
    { noAck: true },
  );
});
await conn.close();
