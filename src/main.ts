// Entry point: API and every worker in one process (one machine). See workers/ for single components.
import { allComponents } from './components.ts';
import { main } from './entry.ts';

await main(allComponents, 'all');
