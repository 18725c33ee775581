// DOM construction without HTML strings: every piece of data becomes a text node or an attribute value, so
// hostile content in a transcript is shown, never parsed. (The page's CSP also requires Trusted Types, which
// makes any innerHTML assignment throw.)

const URL_ATTRS = new Set(['href', 'src', 'action', 'formaction', 'xlink:href']);

// h builds an element: h('a', {href: '#/x', class: 'c', onclick: fn}, 'text', child, [more]).
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith('on') && typeof v === 'function') {
        el.addEventListener(k.slice(2), v);
      } else if (k === 'class') {
        el.className = v;
      } else if (k === 'dataset') {
        Object.assign(el.dataset, v);
      } else if (k === 'vars') {
        for (const [name, value] of Object.entries(v)) el.style.setProperty(name, value);
      } else if (URL_ATTRS.has(k)) {
        el.setAttribute(k, safeURL(String(v)));
      } else if (k === 'value' || k === 'checked' || k === 'disabled' || k === 'open' || k === 'hidden') {
        el[k] = v;
      } else {
        el.setAttribute(k, v === true ? '' : String(v));
      }
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

// safeURL lets only in-console links and http(s) URLs through.
export function safeURL(u) {
  if (u.startsWith('#') || u.startsWith('./') || u.startsWith('/')) return u;
  try {
    const p = new URL(u, location.href);
    if (p.protocol === 'http:' || p.protocol === 'https:') return p.href;
  } catch { /* not a URL */ }
  return '#';
}

// clear empties el and appends children.
export function clear(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

export function fmtTime(s) {
  if (!s) return '';
  const d = new Date(s);
  if (isNaN(d)) return String(s);
  return d.toLocaleString(undefined, {year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit'});
}

export function ago(s) {
  if (!s) return '';
  const d = (Date.now() - new Date(s).getTime()) / 1000;
  if (!isFinite(d)) return '';
  if (d < 5) return 'just now';
  if (d < 60) return `${Math.round(d)} s ago`;
  if (d < 3600) return `${Math.round(d / 60)} min ago`;
  if (d < 86400) return `${Math.round(d / 3600)} h ago`;
  return `${Math.round(d / 86400)} d ago`;
}

export function fmtDuration(ms) {
  if (!isFinite(ms) || ms < 0) return '';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
  const m = Math.floor(ms / 60000);
  return `${m} min ${Math.round((ms % 60000) / 1000)} s`;
}

export function time(s) {
  return h('time', {datetime: s || '', title: fmtTime(s)}, ago(s));
}

export function statusBadge(status) {
  return h('span', {class: `badge status-${String(status).replace(/[^a-z_]/g, '')}`}, status || 'unknown');
}

// pretty shows a JSON value indented (strings as they are).
export function pretty(v) {
  if (typeof v === 'string') return v;
  try { return JSON.stringify(v, null, 2); } catch { return String(v); }
}

// empty is the placeholder of a list with nothing in it.
export function empty(title, hint) {
  return h('div', {class: 'empty'}, h('p', {class: 'empty-title'}, title), hint ? h('p', null, hint) : null);
}

let toastTimer;
export function toast(msg, kind) {
  const t = document.getElementById('toast');
  t.className = `toast show ${kind || ''}`;
  t.textContent = msg;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { t.className = 'toast'; }, 4000);
}

// fact is an entry of a page's facts (dl.facts): its label, then the dd's attributes and content.
export const fact = (label, attrs, ...v) => h('div', null, h('dt', null, label), h('dd', attrs, ...v));

// crumbs is a page's breadcrumb trail.
export const crumbs = (...c) => h('nav', {class: 'crumbs', 'aria-label': 'Breadcrumb'}, ...c);

// mono is text in the monospace face (an id, a path); meta a line of secondary text.
export const mono = (...c) => h('span', {class: 'mono'}, ...c);
export const meta = (...c) => h('p', {class: 'meta'}, ...c);

// to links an id to its page: to('sessions', id) is #/sessions/<id>.
export const to = (page, id) => h('a', {href: `#/${page}/${encodeURIComponent(id)}`, class: 'mono'}, id);
