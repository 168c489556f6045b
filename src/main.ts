// Entry point: API and every worker in one process (one machine). See workers/ for single components.
import { allComponents } from './components.ts';
import { main } from './entry.ts';

// `npm start` runs with no setup: with ENCRYPTION=on (the default) and no KEK_FILE or KEK, it creates a
// development key-encryption key in .faxline/dev-kek on its first start (docs/encryption.md). The
// single-component entry points (workers/, api-main.ts, the deployments) need a configured key.
await main(allComponents, 'all', { devKekFile: '.faxline/dev-kek' });
