// Compares two V8 heap snapshots (.heapsnapshot, e.g. from `SOAK_SNAPSHOT_AT=1,5 npm run soak`):
// objects by constructor (or node type), their count and shallow size in each, sorted by growth;
// then, for the types that grew most, sample retainer paths in the later snapshot (who keeps them).
// Usage: node scripts/heap-diff.ts <early.heapsnapshot> <late.heapsnapshot> [top=25] [type...]
// Listing types after `top` follows those instead of the largest growers.
import { readFileSync } from 'node:fs';

interface Raw {
  snapshot: {
    meta: {
      node_fields: string[];
      node_types: [string[], ...unknown[]];
      edge_fields: string[];
      edge_types: [string[], ...unknown[]];
    };
  };
  nodes: number[];
  edges: number[];
  strings: string[];
}

interface Heap {
  raw: Raw;
  nodeCount: number;
  nf: number; // fields per node
  ef: number; // fields per edge
  firstEdge: Uint32Array; // index into edges (in edge records) of each node's first edge
  type: (n: number) => string;
  name: (n: number) => string;
  key: (n: number) => string; // what we group by
  size: (n: number) => number;
  id: (n: number) => number;
}

function load(path: string): Heap {
  const raw = JSON.parse(readFileSync(path, 'utf8')) as Raw;
  const m = raw.snapshot.meta;
  const nf = m.node_fields.length;
  const ef = m.edge_fields.length;
  const [iType, iName, iId, iSize, iEdges] = ['type', 'name', 'id', 'self_size', 'edge_count'].map((f) =>
    m.node_fields.indexOf(f),
  ) as [number, number, number, number, number];
  const nodeTypes = m.node_types[0];
  const nodeCount = raw.nodes.length / nf;
  const firstEdge = new Uint32Array(nodeCount + 1);
  for (let n = 0, e = 0; n < nodeCount; n++) {
    firstEdge[n] = e;
    e += raw.nodes[n * nf + iEdges]!;
    firstEdge[n + 1] = e;
  }
  const type = (n: number) => nodeTypes[raw.nodes[n * nf + iType]!]!;
  const name = (n: number) => raw.strings[raw.nodes[n * nf + iName]!]!;
  const key = (n: number) => {
    const t = type(n);
    if (t === 'object' || t === 'native') return name(n);
    if (t === 'closure') return `(closure ${name(n) || 'anonymous'})`;
    return `(${t})`;
  };
  return {
    raw,
    nodeCount,
    nf,
    ef,
    firstEdge,
    type,
    name,
    key,
    size: (n) => raw.nodes[n * nf + iSize]!,
    id: (n) => raw.nodes[n * nf + iId]!,
  };
}

function histogram(h: Heap): Map<string, { count: number; bytes: number }> {
  const out = new Map<string, { count: number; bytes: number }>();
  for (let n = 0; n < h.nodeCount; n++) {
    const k = h.key(n);
    const e = out.get(k) ?? { count: 0, bytes: 0 };
    e.count++;
    e.bytes += h.size(n);
    out.set(k, e);
  }
  return out;
}

/** For each node, the nodes holding an edge to it (first few), skipping weak edges. */
function retainers(h: Heap): { from: Int32Array[]; label: (from: number, to: number) => string } {
  const m = h.raw.snapshot.meta;
  const iEType = m.edge_fields.indexOf('type');
  const iEName = m.edge_fields.indexOf('name_or_index');
  const iETo = m.edge_fields.indexOf('to_node');
  const edgeTypes = m.edge_types[0];
  const weak = edgeTypes.indexOf('weak');
  const lists: number[][] = Array.from({ length: h.nodeCount }, () => []);
  const edges = h.raw.edges;
  for (let n = 0; n < h.nodeCount; n++) {
    for (let e = h.firstEdge[n]!; e < h.firstEdge[n + 1]!; e++) {
      if (edges[e * h.ef + iEType] === weak) continue;
      const to = edges[e * h.ef + iETo]! / h.nf;
      const l = lists[to]!;
      if (l.length < 4) l.push(n);
    }
  }
  const label = (from: number, to: number) => {
    for (let e = h.firstEdge[from]!; e < h.firstEdge[from + 1]!; e++) {
      if (edges[e * h.ef + iETo]! / h.nf !== to) continue;
      const t = edgeTypes[edges[e * h.ef + iEType]!]!;
      const v = edges[e * h.ef + iEName]!;
      return t === 'element' || t === 'hidden' ? `[${v}]` : `.${h.raw.strings[v]}`;
    }
    return '?';
  };
  return { from: lists.map((l) => Int32Array.from(l)), label };
}

/** What a node holds, `depth` levels down (weak edges and hidden maps left out). */
function expand(h: Heap, n: number, depth: number, indent = '    '): string {
  const m = h.raw.snapshot.meta;
  const iEType = m.edge_fields.indexOf('type');
  const iEName = m.edge_fields.indexOf('name_or_index');
  const iETo = m.edge_fields.indexOf('to_node');
  const edgeTypes = m.edge_types[0];
  const lines: string[] = [];
  for (let e = h.firstEdge[n]!; e < h.firstEdge[n + 1]! && lines.length < 40; e++) {
    const t = edgeTypes[h.raw.edges[e * h.ef + iEType]!]!;
    if (t === 'weak' || t === 'hidden') continue;
    const v = h.raw.edges[e * h.ef + iEName]!;
    const label = t === 'element' ? `[${v}]` : String(h.raw.strings[v]);
    if (label === 'map' || label === '__proto__') continue;
    const to = h.raw.edges[e * h.ef + iETo]! / h.nf;
    const str = h.type(to) === 'string' ? ` "${h.name(to).slice(0, 60)}"` : '';
    lines.push(`${indent}${label}: ${h.key(to)}${str}`);
    if (depth > 1) lines.push(expand(h, to, depth - 1, `${indent}  `));
  }
  return lines.filter(Boolean).join('\n');
}

function main(): void {
  const [a, b, topArg, ...follow] = process.argv.slice(2);
  if (!a || !b) {
    console.error(
      'usage: node scripts/heap-diff.ts <early.heapsnapshot> <late.heapsnapshot> [top] [type...]',
    );
    process.exit(2);
  }
  const top = Number(topArg ?? 25);
  const early = load(a);
  const late = load(b);
  const ha = histogram(early);
  const hb = histogram(late);
  const rows = [...new Set([...ha.keys(), ...hb.keys()])].map((k) => {
    const x = ha.get(k) ?? { count: 0, bytes: 0 };
    const y = hb.get(k) ?? { count: 0, bytes: 0 };
    return { k, c0: x.count, c1: y.count, b0: x.bytes, b1: y.bytes, db: y.bytes - x.bytes };
  });
  rows.sort((p, q) => q.db - p.db);
  const total = (hm: Map<string, { bytes: number }>) => [...hm.values()].reduce((s, v) => s + v.bytes, 0);
  console.log(
    `total shallow: ${(total(ha) / 1048576).toFixed(2)} MB -> ${(total(hb) / 1048576).toFixed(2)} MB; ` +
      `nodes ${early.nodeCount} -> ${late.nodeCount}`,
  );
  console.log('growth   bytes_before  bytes_after  count_before  count_after  type');
  for (const r of rows.slice(0, top))
    console.log(
      `${String(r.db).padStart(9)} ${String(r.b0).padStart(12)} ${String(r.b1).padStart(12)} ` +
        `${String(r.c0).padStart(12)} ${String(r.c1).padStart(12)}  ${r.k}`,
    );

  // Retainer paths of a few objects of each followed type that are new in the late snapshot.
  const types = follow.length > 0 ? follow : rows.slice(0, 5).map((r) => r.k);
  const oldIds = new Set<number>();
  for (let n = 0; n < early.nodeCount; n++) oldIds.add(early.id(n));
  const ret = retainers(late);
  for (const t of types) {
    console.log(`\n== retainers of new ${t}`);
    const samples: number[] = [];
    for (let n = 0; n < late.nodeCount && samples.length < 3; n++) {
      // take samples spread out: every 97th new node of the type
      if (late.key(n) === t && !oldIds.has(late.id(n)) && late.id(n) % 97 === 0) samples.push(n);
    }
    for (const s of samples) {
      if (process.env.HEAP_DIFF_EXPAND) console.log(expand(late, s, Number(process.env.HEAP_DIFF_EXPAND)));
      const path: string[] = [];
      let cur = s;
      const seen = new Set<number>([cur]);
      for (let depth = 0; depth < 14; depth++) {
        const froms = [...ret.from[cur]!].filter((f) => !seen.has(f));
        // Prefer a retainer that is not a synthetic root or system node.
        const f =
          froms.find((x) => !late.key(x).startsWith('(system') && late.type(x) !== 'synthetic') ?? froms[0];
        if (f === undefined) break;
        path.push(`${late.key(f)}${ret.label(f, cur)}`);
        seen.add(f);
        cur = f;
      }
      console.log(`  ${t} <- ${path.join(' <- ')}`);
    }
  }
}

main();
