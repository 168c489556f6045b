// Preloaded into a child process (NODE_OPTIONS=--import) to make its wall clock jump while it runs:
// every SIGUSR2 moves Date (Date.now() and `new Date()`) by FAXLINE_TEST_CLOCK_JUMP_MS. Timers
// (setTimeout, AbortSignal.timeout) run on the monotonic clock and are not moved, exactly as when
// NTP or an operator steps a host's clock. Only for the fault tests; the machine's clock is untouched.
const RealDate = Date;
const jump = Number(process.env.FAXLINE_TEST_CLOCK_JUMP_MS ?? 0);
let offset = 0;

class ShiftedDate extends RealDate {
  constructor(...args: unknown[]) {
    if (args.length === 0) super(RealDate.now() + offset);
    else super(...(args as [number]));
  }
  static override now(): number {
    return RealDate.now() + offset;
  }
}

globalThis.Date = ShiftedDate as DateConstructor;
process.on('SIGUSR2', () => {
  offset += jump;
  process.stdout.write(`${JSON.stringify({ level: 30, msg: 'test clock jumped', offsetMs: offset })}\n`);
});
