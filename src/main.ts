// Entry point: API and every worker in one process (one machine). See workers/ for single components.
import { allComponents, type Component } from './components.ts';
import { runMain } from './run.ts';

await runMain(allComponents as Component[]);
