// A line diff (longest common subsequence after the common prefix and suffix are cut), for agent versions.

const MAX_CELLS = 4e6; // beyond this the middle is shown as removed then added

// diffLines returns [{op: ' '|'-'|'+', text}] turning a into b.
export function diffLines(a, b) {
  let p = 0;
  while (p < a.length && p < b.length && a[p] === b[p]) p++;
  let s = 0;
  while (s < a.length - p && s < b.length - p && a[a.length - 1 - s] === b[b.length - 1 - s]) s++;
  const out = a.slice(0, p).map(text => ({op: ' ', text}));
  const am = a.slice(p, a.length - s), bm = b.slice(p, b.length - s);
  const n = am.length, m = bm.length;
  if (n * m > MAX_CELLS) {
    out.push(...am.map(text => ({op: '-', text})), ...bm.map(text => ({op: '+', text})));
  } else {
    // lcs[i][j]: the LCS length of am[i:] and bm[j:], in one flat array.
    const w = m + 1;
    const lcs = new Uint32Array((n + 1) * w);
    for (let i = n - 1; i >= 0; i--) {
      for (let j = m - 1; j >= 0; j--) {
        lcs[i * w + j] = am[i] === bm[j] ? lcs[(i + 1) * w + j + 1] + 1 : Math.max(lcs[(i + 1) * w + j], lcs[i * w + j + 1]);
      }
    }
    let i = 0, j = 0;
    while (i < n && j < m) {
      if (am[i] === bm[j]) { out.push({op: ' ', text: am[i]}); i++; j++; }
      else if (lcs[(i + 1) * w + j] >= lcs[i * w + j + 1]) out.push({op: '-', text: am[i++]});
      else out.push({op: '+', text: bm[j++]});
    }
    while (i < n) out.push({op: '-', text: am[i++]});
    while (j < m) out.push({op: '+', text: bm[j++]});
  }
  out.push(...a.slice(a.length - s).map(text => ({op: ' ', text})));
  return out;
}

// canonical is v as indented JSON with sorted keys, so two versions line up.
export function canonical(v) {
  const sort = x => Array.isArray(x) ? x.map(sort) : x && typeof x === 'object'
    ? Object.fromEntries(Object.keys(x).sort().map(k => [k, sort(x[k])])) : x;
  return JSON.stringify(sort(v), null, 2).split('\n');
}
