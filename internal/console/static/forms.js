// Forms that create and edit resources. The API validates: a form only shapes its fields into the JSON body of
// the /v1 endpoint and shows the API's error message when it refuses (the fields carry no `required` or
// `pattern` of their own, so the message a user reads is the one the SDKs get). Fields are filled from the API
// by value, never by markup.

import {h, clear, toast} from './dom.js';
import {post, del} from './api.js';

// row is a labelled control with an optional hint: h('label') around the text, so a click focuses the control.
export function row(label, control, hint) {
  const hintID = hint ? `${control.id}-hint` : null;
  if (hintID) control.setAttribute('aria-describedby', hintID);
  return h('div', {class: 'form-row'},
    h('label', {for: control.id}, label),
    control,
    hint ? h('p', {class: 'hint', id: hintID}, hint) : null);
}

export function text(id, value, attrs) {
  return h('input', Object.assign({type: 'text', id, name: id, value: value || '', autocomplete: 'off', spellcheck: 'false'}, attrs || {}));
}

export function area(id, value, rows, attrs) {
  return h('textarea', Object.assign({id, name: id, rows: String(rows || 4), spellcheck: 'false', value: value || ''}, attrs || {}));
}

// FormError is a mistake found before the request (a JSON field that does not parse); its message names the field.
export class FormError extends Error {}

// parseJSON reads a JSON field; blank is undefined (the field is left out).
export function parseJSON(label, s) {
  if (!s.trim()) return undefined;
  try {
    return JSON.parse(s);
  } catch (e) {
    throw new FormError(`${label}: not valid JSON (${e.message}).`);
  }
}

// json shows a value for a JSON field: indented, or blank for nothing.
export function json(v) {
  if (v === undefined || v === null) return '';
  if (Array.isArray(v) && !v.length) return '';
  if (typeof v === 'object' && !Array.isArray(v) && !Object.keys(v).length) return '';
  return JSON.stringify(v, null, 2);
}

// same reports whether two JSON values are equal (key order aside).
export function same(a, b) {
  return canon(a) === canon(b);
}

function canon(v) {
  if (Array.isArray(v)) return `[${v.map(canon).join(',')}]`;
  if (v && typeof v === 'object') return `{${Object.keys(v).sort().map(k => `${JSON.stringify(k)}:${canon(v[k])}`).join(',')}}`;
  return JSON.stringify(v === undefined ? null : v);
}

// metadataPatch is the metadata of an update: the keys set or changed, and null for each key removed.
export function metadataPatch(before, after) {
  const out = {};
  for (const k of Object.keys(before || {})) if (!(k in after)) out[k] = null;
  for (const [k, v] of Object.entries(after)) if (!before || before[k] !== v) out[k] = v;
  return Object.keys(out).length ? out : undefined;
}

// words splits a list field (spaces, commas or new lines) into its entries.
export function words(s) {
  return s.split(/[\s,]+/).filter(Boolean);
}

// lines splits a field of one entry a line into its entries, blank lines left out.
export function lines(s) {
  return s.split('\n').map(l => l.trim()).filter(Boolean);
}

// form builds a form whose submit runs send(): the button is disabled meanwhile, and a refusal (the API's
// message, or a FormError) is shown in the form's alert, the fields kept as they were.
export function form(id, fields, submitLabel, send, cancelHref) {
  const alert = h('div', {class: 'notice error form-error', id: `${id}-error`, role: 'alert', hidden: true});
  const submit = h('button', {type: 'submit', class: 'primary', id: `${id}-submit`}, submitLabel);
  const f = h('form', {class: 'card editor', id, novalidate: true, onsubmit: async ev => {
    ev.preventDefault();
    submit.disabled = true;
    alert.hidden = true;
    try {
      await send();
    } catch (e) {
      if (e && e.name === 'AbortError') return;
      clear(alert, e.status ? h('strong', null, `${e.status} ${e.type}: `) : null, e.message || String(e));
      alert.hidden = false;
      alert.scrollIntoView({block: 'nearest'});
    } finally {
      submit.disabled = false;
    }
  }},
  fields,
  alert,
  h('div', {class: 'form-actions'}, submit, cancelHref ? h('a', {href: cancelHref, class: 'cancel'}, 'Cancel') : null));
  return f;
}

// twoClick is a button for what cannot be undone (revoke, delete, archive): the first click arms it and says so,
// the second acts; a refusal is shown in a toast and the button may be tried again.
export function twoClick(label, again, attrs, act) {
  const b = h('button', Object.assign({type: 'button', class: 'danger small'}, attrs), label);
  b.addEventListener('click', async () => {
    if (b.dataset.armed !== '1') { b.dataset.armed = '1'; b.textContent = again; return; }
    b.disabled = true;
    try { await act(); } catch (e) { b.disabled = false; toast(e.message, 'error'); }
  });
  return b;
}

// once is the notice of a secret the API shows this once (a worker key, a signing secret), with a Copy button:
// the page keeps it nowhere, so leaving or reloading it forgets the secret. note replaces the notice's warning.
export function once(title, secret, id, note) {
  const value = h('input', {type: 'text', id: `new-${id}-value`, class: 'mono', readonly: true, value: secret, autocomplete: 'off', spellcheck: 'false'});
  return h('div', {class: 'notice', role: 'status'},
    h('strong', null, title, ' '), note || 'Copy it now: it is shown this once, and neither the API nor this page can show it again.',
    h('div', {class: 'key-row'}, value, h('button', {type: 'button', id: `copy-${id}`, onclick: async () => {
      try { await navigator.clipboard.writeText(secret); toast('Copied.'); } catch { value.select(); toast('Select and copy it.', 'error'); }
    }}, 'Copy')));
}

// gone is a resource page's two-click Archive (POST path/archive) or Delete (DELETE path); done, it shows the list.
export function gone(verb, path, list, id, again) {
  return twoClick(verb, again || `Click again to ${verb.toLowerCase()}`, {id}, async () => {
    await (verb === 'Delete' ? del(path) : post(`${path}/archive`, {}));
    location.hash = list;
  });
}
