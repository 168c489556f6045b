// Builds the optional SpanDSP addons (native/spandsp: faxloop, the loopback line; faxmedia, the SIP
// media engine) when libspandsp and libtiff headers are present; otherwise says so and exits 0, since
// the rest of faxline does not need them. Each built addon is loaded once to check that it links.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const dir = new URL('../native/spandsp/', import.meta.url).pathname;
const probe = spawnSync('pkg-config', ['--exists', 'spandsp', 'libtiff-4']);
if (probe.status !== 0) {
  console.log('build-native: libspandsp-dev or libtiff-dev not installed; the loopback line is not built.');
  console.log(
    'build-native: `apt-get install libspandsp-dev libtiff-dev` and run `npm run build:native` to add it.',
  );
  process.exit(0);
}
const gyp = require.resolve('node-gyp/bin/node-gyp.js');
// N-API is ABI-stable across Node versions: the system Node's headers (/usr/include/node) build an
// addon that Node 24 loads, without downloading headers.
const args = [gyp, 'rebuild', '--directory', dir];
if (existsSync('/usr/include/node/node_api.h')) args.push('--nodedir=/usr');
const r = spawnSync(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'], encoding: 'utf8' });
if (r.status !== 0) {
  process.stdout.write(r.stdout ?? '');
  console.error('build-native: the SpanDSP addon failed to build');
  process.exit(r.status ?? 1);
}
for (const target of ['faxloop', 'faxmedia']) {
  const file = `${dir}build/Release/${target}.node`;
  try {
    require(file);
  } catch (err) {
    console.error(`build-native: ${file} was built but does not load: ${String(err)}`);
    process.exit(1);
  }
  console.log(`build-native: built ${file.slice(file.indexOf('native/'))}`);
}
