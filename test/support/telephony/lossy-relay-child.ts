// The lossy relay in a process of its own (see startLossyRelayProcess in lossy-relay.ts): started
// with an IPC channel and its options as JSON in argv[2] (ports included, claimed by the parent).
// Sends {ready: true} once both sockets are bound; on {close: true} closes them, sends the final
// {counts} and exits. It exits as well when the parent goes away, so a killed test leaves no relay.
import { startLossyRelay, type LossyRelayOptions } from './lossy-relay.ts';

const options = JSON.parse(process.argv[2]!) as Omit<LossyRelayOptions, 'droppable'>;
const relay = await startLossyRelay(options);
process.on('message', (m: { close?: boolean }) => {
  if (!m.close) return;
  void relay.close().then(() => process.send!({ counts: relay.counts }, () => process.exit(0)));
});
process.once('disconnect', () => process.exit(0));
process.send!({ ready: true });
