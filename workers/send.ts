// Entry point: send/forward worker only (fetch, check, render, transmit).
import { main } from '../src/entry.ts';

await main(['send']);
