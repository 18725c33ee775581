// The console's client of the public HTTP API: the same endpoints and headers the SDKs use. The API key lives in
// this tab's sessionStorage only (never in a URL, never in local storage).

const KEY = 'corral.console.key';
export const BETA = 'managed-agents-2026-04-01';

export function apiKey() { return sessionStorage.getItem(KEY) || ''; }
export function setKey(k) { sessionStorage.setItem(KEY, k); }
export function forgetKey() { sessionStorage.removeItem(KEY); sessionStorage.removeItem(WS); }

// The workspace the console acts in, as an organization admin key names it (anthropic-workspace-id); none is the
// key's own (a workspace key's, or the default workspace for an admin key).
const WS = 'corral.console.workspace';
export function workspace() { return sessionStorage.getItem(WS) || ''; }
export function setWorkspace(w) { if (w) sessionStorage.setItem(WS, w); else sessionStorage.removeItem(WS); }

export class APIError extends Error {
  constructor(status, type, message) {
    super(message || `HTTP ${status}`);
    this.status = status;
    this.type = type;
  }
}

export function headers(extra) {
  const ws = workspace() ? {'anthropic-workspace-id': workspace()} : {};
  return Object.assign({'x-api-key': apiKey(), 'anthropic-beta': BETA, 'anthropic-version': '2023-06-01'}, ws, extra || {});
}

let onUnauthorized = () => {};
export function setUnauthorizedHandler(f) { onUnauthorized = f; }

// call sends one request; a JSON body is given as an object. It throws APIError with the envelope's message.
export async function call(method, path, body, opts) {
  // A FormData body goes as multipart (the browser writes its content type and boundary); any other as JSON.
  const multipart = body instanceof FormData;
  const init = {method, headers: headers(body !== undefined && !multipart ? {'content-type': 'application/json'} : {}),
    cache: 'no-store', credentials: 'omit', referrerPolicy: 'no-referrer', signal: opts && opts.signal};
  if (body !== undefined) init.body = multipart ? body : JSON.stringify(body);
  let resp;
  try {
    resp = await fetch(path, init);
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new APIError(0, 'network_error', `The server did not answer (${e.message}).`);
  }
  if (resp.ok && opts && opts.blob) return resp.blob();
  const text = await resp.text();
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch { data = null; }
  }
  if (!resp.ok) {
    const err = data && data.error ? data.error : {};
    const e = new APIError(resp.status, err.type || 'error', err.message || `${resp.status} ${resp.statusText}`);
    if (resp.status === 401 && !(opts && opts.noLogout)) onUnauthorized(e);
    throw e;
  }
  return data;
}

// query builds "?a=1&b=2" from the set entries of params (arrays repeat the key).
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v === undefined || v === null || v === '') continue;
    if (Array.isArray(v)) v.forEach(x => q.append(k, x));
    else q.set(k, String(v));
  }
  const s = q.toString();
  return s ? `?${s}` : '';
}

export const get = (path, params, opts) => call('GET', path + query(params), undefined, opts);
export const post = (path, body) => call('POST', path, body);
export const del = path => call('DELETE', path);
// upload posts a multipart form (files, skills).
export const upload = (path, formData) => call('POST', path, formData);

// download fetches path with the key (a plain link could not carry it) and saves the answer as filename.
export async function download(path, filename) {
  const blob = await call('GET', path, undefined, {blob: true});
  const url = URL.createObjectURL(blob);
  const a = document.createElement('a');
  a.href = url; // a blob: URL of this page, which dom.js's h() would not take
  a.download = filename;
  a.hidden = true;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60000);
}
export const id = s => encodeURIComponent(s);

// sendEvents posts client events to a session.
export const sendEvents = (sessionID, events) => post(`/v1/sessions/${id(sessionID)}/events`, {events});
