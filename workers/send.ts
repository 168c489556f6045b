// Entry point: send/forward worker only (fetch, check, render, transmit).
import { runMain } from '../src/run.ts';

await runMain(['send']);
