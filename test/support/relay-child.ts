// A relay in its own process, for the crash test: publishes outbox events; with KILL_AFTER=n it is
// SIGKILLed after its n-th confirmed publish, before its batch commits.
import { Broker } from '../../src/amqp/broker.ts';
import { createPool } from '../../src/db/pool.ts';
import { brokerEventPublisher } from '../../src/events/component.ts';
import { EventRelay } from '../../src/events/relay.ts';
import { createLogger } from '../../src/log.ts';

const env = process.env;
const log = createLogger('warn');
const db = createPool(env.DATABASE_URL!, 2, log);
const broker = new Broker(
  { url: env.AMQP_URL!, prefix: env.PREFIX!, queueType: 'quorum', deliveryLimit: 5 },
  log,
);
await broker.start();
const killAfter = Number(env.KILL_AFTER ?? 0);
const publish = brokerEventPublisher(broker);
let n = 0;
const relay = new EventRelay({
  db,
  log,
  batchSize: Number(env.BATCH ?? 500),
  publish: async (key, e) => {
    await publish(key, e);
    if (killAfter > 0 && ++n >= killAfter) process.kill(process.pid, 'SIGKILL');
  },
});
while ((await relay.runOnce()) > 0);
await broker.close();
await db.end();
