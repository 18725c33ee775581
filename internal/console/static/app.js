// The console's shell: login, the hash router (the key never enters a URL; the pages' state does, so a link
// to a session or a filtered list can be shared), the keyboard shortcuts, and the pages' lifecycles.

import {h, clear, toast} from './dom.js';
import {apiKey, setKey, forgetKey, get, setUnauthorizedHandler, APIError} from './api.js';
import {sessionsPage} from './sessions.js';
import {sessionPage} from './session.js';
import {threadPage} from './threads.js';
import {agentsPage, agentPage, agentDiffPage, agentEditPage} from './agents.js';
import {environmentsPage, environmentPage, environmentEditPage} from './environments.js';
import {vaultsPage, vaultPage, vaultEditPage, credentialEditPage} from './vaults.js';
import {filesPage} from './files.js';
import {skillsPage, skillPage} from './skills.js';
import {memoryStoresPage, memoryStorePage} from './memory.js';
import {dreamsPage, dreamPage} from './dreams.js';
import {deploymentsPage, deploymentPage, deploymentNewPage, deploymentRunPage} from './deployments.js';
import {webhooksPage, webhookPage} from './webhooks.js';
import {tunnelsPage, tunnelPage} from './tunnels.js';
import {workspacesPage, workspacePage} from './workspaces.js';

const main = document.getElementById('main');
const top = document.getElementById('top');
let cleanup = null;
let keys = {};
let loginMessage = '';

// Each page renders into the view it is given and returns {cleanup, keys}.
const routes = [
  [/^\/sessions\/([^/]+)$/, (v, m) => sessionPage(v, decodeURIComponent(m[1]))],
  [/^\/sessions\/([^/]+)\/threads\/([^/]+)$/, (v, m) => threadPage(v, decodeURIComponent(m[1]), decodeURIComponent(m[2]))],
  [/^\/sessions$/, (v, m, q) => sessionsPage(v, q)],
  [/^\/agents\/new$/, v => agentEditPage(v, '')],
  [/^\/agents\/([^/]+)\/edit$/, (v, m) => agentEditPage(v, decodeURIComponent(m[1]))],
  [/^\/agents\/([^/]+)\/diff$/, (v, m, q) => agentDiffPage(v, decodeURIComponent(m[1]), q)],
  [/^\/agents\/([^/]+)$/, (v, m, q) => agentPage(v, decodeURIComponent(m[1]), q)],
  [/^\/agents$/, (v, m, q) => agentsPage(v, q)],
  [/^\/environments\/new$/, v => environmentEditPage(v, '')],
  [/^\/environments\/([^/]+)\/edit$/, (v, m) => environmentEditPage(v, decodeURIComponent(m[1]))],
  [/^\/environments\/([^/]+)$/, (v, m) => environmentPage(v, decodeURIComponent(m[1]))],
  [/^\/environments$/, (v, m, q) => environmentsPage(v, q)],
  [/^\/vaults\/new$/, v => vaultEditPage(v, '')],
  [/^\/vaults\/([^/]+)\/edit$/, (v, m) => vaultEditPage(v, decodeURIComponent(m[1]))],
  [/^\/vaults\/([^/]+)\/credentials\/new$/, (v, m) => credentialEditPage(v, decodeURIComponent(m[1]), '')],
  [/^\/vaults\/([^/]+)\/credentials\/([^/]+)\/edit$/, (v, m) => credentialEditPage(v, decodeURIComponent(m[1]), decodeURIComponent(m[2]))],
  [/^\/vaults\/([^/]+)$/, (v, m) => vaultPage(v, decodeURIComponent(m[1]))],
  [/^\/vaults$/, (v, m, q) => vaultsPage(v, q)],
  [/^\/files$/, (v, m, q) => filesPage(v, q)],
  [/^\/skills\/([^/]+)$/, (v, m) => skillPage(v, decodeURIComponent(m[1]))],
  [/^\/skills$/, (v, m, q) => skillsPage(v, q)],
  [/^\/memory\/([^/]+)$/, (v, m, q) => memoryStorePage(v, decodeURIComponent(m[1]), q)],
  [/^\/memory$/, (v, m, q) => memoryStoresPage(v, q)],
  [/^\/dreams\/([^/]+)$/, (v, m) => dreamPage(v, decodeURIComponent(m[1]))],
  [/^\/dreams$/, (v, m, q) => dreamsPage(v, q)],
  [/^\/deployments\/new$/, v => deploymentNewPage(v)],
  [/^\/deployments\/([^/]+)$/, (v, m, q) => deploymentPage(v, decodeURIComponent(m[1]), q)],
  [/^\/deployments$/, (v, m, q) => deploymentsPage(v, q)],
  [/^\/deployment_runs\/([^/]+)$/, (v, m) => deploymentRunPage(v, decodeURIComponent(m[1]))],
  [/^\/webhooks\/([^/]+)$/, (v, m) => webhookPage(v, decodeURIComponent(m[1]))],
  [/^\/webhooks$/, (v, m, q) => webhooksPage(v, q)],
  [/^\/tunnels\/([^/]+)$/, (v, m) => tunnelPage(v, decodeURIComponent(m[1]))],
  [/^\/tunnels$/, (v, m, q) => tunnelsPage(v, q)],
  [/^\/workspaces\/([^/]+)$/, (v, m) => workspacePage(v, decodeURIComponent(m[1]))],
  [/^\/workspaces$/, (v, m, q) => workspacesPage(v, q)],
];

// parseHash splits "#/path?a=b" into the path and its parameters.
export function parseHash() {
  const raw = location.hash.replace(/^#/, '') || '/sessions';
  const i = raw.indexOf('?');
  const path = i < 0 ? raw : raw.slice(0, i);
  const q = new URLSearchParams(i < 0 ? '' : raw.slice(i + 1));
  return {path, q};
}

// navigate replaces the page's parameters (filters, cursors) without adding a history entry per keystroke.
export function setQuery(q, push) {
  const {path} = parseHash();
  const s = q.toString();
  const url = `#${path}${s ? `?${s}` : ''}`;
  if (push) history.pushState(null, '', url);
  else history.replaceState(null, '', url);
}

// Each route renders into a view of its own: a page still loading when the next is asked for renders into its
// detached view, and is cleaned up, instead of over the new page.
let routeSeq = 0;

async function route() {
  const my = ++routeSeq;
  if (cleanup) { try { cleanup(); } catch { /* a page's cleanup must not stop the next */ } }
  cleanup = null;
  keys = {};
  document.getElementById('toast').className = 'toast';
  if (!apiKey()) { showLogin(); return; }
  top.hidden = false;
  const {path, q} = parseHash();
  for (const a of top.querySelectorAll('[data-nav]')) {
    if (path.startsWith(`/${a.dataset.nav}`)) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  for (const [re, page] of routes) {
    const m = path.match(re);
    if (!m) continue;
    const view = h('div', {class: 'view'}, h('p', {class: 'loading'}, 'Loading…'));
    clear(main, view);
    try {
      const res = await page(view, m, q);
      if (my !== routeSeq) {
        if (res && res.cleanup) res.cleanup();
        return;
      }
      if (res) { cleanup = res.cleanup || null; keys = res.keys || {}; }
      document.title = `${main.querySelector('h1')?.textContent || 'Console'} · Corral`;
      // A new page takes the focus (screen readers announce it; Tab starts from its top), not the scroll.
      if (navigated) main.focus({preventScroll: true});
    } catch (e) {
      if (my !== routeSeq || (e instanceof APIError && e.status === 401)) return;
      clear(view, h('div', {class: 'notice error', role: 'alert'}, h('strong', null, 'Could not load this page. '), e.message));
    }
    return;
  }
  clear(main, h('div', {class: 'notice'}, 'No such page. ', h('a', {href: '#/sessions'}, 'Go to the sessions.')));
}

function showLogin() {
  top.hidden = true;
  const input = h('input', {id: 'api-key', type: 'password', name: 'api-key', autocomplete: 'off', spellcheck: 'false',
    required: true, placeholder: 'corral-…', 'aria-describedby': 'login-help'});
  const msg = h('p', {class: 'login-error', role: 'alert'}, loginMessage);
  const form = h('form', {class: 'login', onsubmit: async ev => {
    ev.preventDefault();
    const k = input.value.trim();
    if (!k) return;
    setKey(k);
    try {
      await get('/v1/agents', {limit: 1}, {noLogout: true});
    } catch (e) {
      forgetKey();
      msg.textContent = e.status === 401 ? 'This API key was refused.' : e.message;
      input.focus();
      return;
    }
    loginMessage = '';
    if (!location.hash || location.hash === '#' || location.hash.startsWith('#/login')) location.hash = '#/sessions';
    else route();
  }},
  h('h1', null, 'Corral console'),
  h('label', {for: 'api-key'}, 'API key'),
  input,
  h('p', {id: 'login-help', class: 'hint'}, 'The key stays in this tab (sessionStorage) and is sent only to this server, in the x-api-key header. Closing the tab forgets it.'),
  msg,
  h('button', {type: 'submit', class: 'primary'}, 'Log in'));
  clear(main, h('div', {class: 'login-wrap'}, form));
  input.focus();
}

setUnauthorizedHandler(() => {
  forgetKey();
  loginMessage = 'Your API key was refused: log in again.';
  route();
});

document.getElementById('logout').addEventListener('click', () => {
  forgetKey();
  loginMessage = 'Logged out.';
  route();
});

const help = document.getElementById('help');
document.getElementById('help-button').addEventListener('click', () => help.showModal());
document.getElementById('help-close').addEventListener('click', () => help.close());

// Keyboard: single keys outside text boxes; "g" then a letter to go to a page.
let pendingG = false;
document.addEventListener('keydown', ev => {
  if (ev.defaultPrevented || ev.altKey || ev.metaKey) return;
  const t = ev.target;
  const typing = t instanceof HTMLElement && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName));
  if (ev.key === 'Escape' && typing) { t.blur(); return; }
  if (typing || ev.ctrlKey || help.open || !apiKey()) return;
  if (pendingG) {
    pendingG = false;
    const to = {s: '#/sessions', a: '#/agents', e: '#/environments', v: '#/vaults', f: '#/files', k: '#/skills', m: '#/memory', d: '#/dreams', y: '#/deployments', w: '#/webhooks', t: '#/tunnels'}[ev.key];
    if (to) { ev.preventDefault(); location.hash = to; }
    return;
  }
  switch (ev.key) {
  case 'g': pendingG = true; setTimeout(() => { pendingG = false; }, 1500); return;
  case '?': ev.preventDefault(); help.showModal(); return;
  case 'j': case 'k': ev.preventDefault(); moveRow(ev.key === 'j' ? 1 : -1); return;
  case '/': {
    const f = main.querySelector('[data-focus-key]');
    if (f) { ev.preventDefault(); f.focus(); }
    return;
  }
  }
  const f = keys[ev.key];
  if (f) { ev.preventDefault(); f(ev); }
});

// moveRow moves the focus to the next or previous row link of the page's list.
function moveRow(d) {
  const rows = [...main.querySelectorAll('[data-row]')];
  if (!rows.length) return;
  const i = rows.indexOf(document.activeElement);
  const next = rows[Math.max(0, Math.min(rows.length - 1, i < 0 ? (d > 0 ? 0 : rows.length - 1) : i + d))];
  next.focus();
  next.scrollIntoView({block: 'nearest'});
}

// navigated is false for the first page of a visit, whose focus stays where the browser puts it.
let navigated = false;
window.addEventListener('hashchange', () => { navigated = true; route(); });
window.addEventListener('unhandledrejection', ev => {
  if (ev.reason && ev.reason.name === 'AbortError') return;
  toast(String(ev.reason && ev.reason.message || ev.reason), 'error');
});
route();
