// Vaults and their credentials. A credential's secrets are write-only: the API never returns them, and the
// console never puts one into a page. Its secret fields start empty on every form (an edit that leaves one
// blank keeps the stored secret), are password inputs the browser is asked not to remember, and are emptied
// as soon as the request is sent.

import {h, clear, time, empty, pretty, fact, crumbs, mono, meta} from './dom.js';
import {get, post, id as esc} from './api.js';
import {pagedList} from './agents.js';
import {row, text, area, form, parseJSON, json, lines, metadataPatch, gone, FormError} from './forms.js';

export function vaultsPage(main, q) {
  return pagedList(main, {title: 'Vaults', path: '/v1/vaults', q, caption: 'Vaults',
    actions: h('a', {class: 'button primary', href: '#/vaults/new', id: 'new-vault'}, 'New vault'),
    emptyTitle: 'No vaults yet.', emptyHint: 'A vault holds the credentials a session may use: MCP server tokens and secret environment variables.',
    columns: [
      ['Vault', v => [h('a', {href: `#/vaults/${esc(v.id)}`, 'data-row': ''}, v.display_name || v.id), h('span', {class: 'sub mono'}, v.id)], 'name'],
      ['Created', v => time(v.created_at), 'opt'],
      ['Updated', v => time(v.updated_at), 'opt'],
    ]});
}

// credentialTarget is what a credential is for: its MCP server, or its environment variable.
function credentialTarget(c) {
  const a = c.auth || {};
  return a.type === 'environment_variable' ? `$${a.secret_name}` : (a.mcp_server_url || '');
}

export async function vaultPage(main, vaultID) {
  const [v, creds] = await Promise.all([get(`/v1/vaults/${esc(vaultID)}`), get(`/v1/vaults/${esc(vaultID)}/credentials`, {limit: 100})]);
  clear(main,
    crumbs(h('a', {href: '#/vaults'}, 'Vaults'), ' / ', mono(v.id)),
    h('div', {class: 'page-head'}, h('h1', null, v.display_name || v.id), h('span', {class: 'spacer'}),
      v.archived_at ? null : [
        h('a', {class: 'button', href: `#/vaults/${esc(v.id)}/edit`, id: 'edit-vault'}, 'Edit'),
        h('a', {class: 'button primary', href: `#/vaults/${esc(v.id)}/credentials/new`, id: 'new-credential'}, 'Add credential'),
        gone('Archive', `/v1/vaults/${esc(v.id)}`, '#/vaults', 'archive-vault')],
      gone('Delete', `/v1/vaults/${esc(v.id)}`, '#/vaults', 'delete-vault')),
    h('dl', {class: 'facts'},
      fact('Created', null, time(v.created_at)),
      fact('Updated', null, time(v.updated_at)),
      v.archived_at ? fact('Archived', null, time(v.archived_at)) : null),
    h('section', {class: 'card'}, h('h2', null, 'Credentials'),
      meta('Secrets are write-only: neither the API nor this page ever shows them. Edit a credential to replace its secret.'),
      creds.data.length ? h('table', {class: 'list', id: 'credentials'},
        h('thead', null, h('tr', null, h('th', null, 'Credential'), h('th', null, 'Type'), h('th', null, 'For'), h('th', null, 'Updated'))),
        h('tbody', null, creds.data.map(c => h('tr', null,
          h('td', {class: 'name'}, h('a', {href: `#/vaults/${esc(v.id)}/credentials/${esc(c.id)}/edit`, 'data-row': ''}, c.display_name || c.id),
            h('span', {class: 'sub mono'}, c.id), c.archived_at ? h('span', {class: 'badge'}, 'archived') : null),
          h('td', {class: 'mono'}, (c.auth && c.auth.type) || ''),
          h('td', {class: 'mono'}, credentialTarget(c)),
          h('td', null, time(c.updated_at))))))
        : empty('No credentials.', 'Add an MCP server token or a secret environment variable.'),
      creds.next_page ? meta('Only the first 100 credentials are listed.') : null),
    Object.keys(v.metadata || {}).length ? h('section', {class: 'card'}, h('h2', null, 'Metadata'), h('pre', {class: 'json'}, pretty(v.metadata))) : null);
  return {keys: {}};
}

function metadataOf(f) {
  const md = parseJSON('Metadata', f.value);
  if (md !== undefined && (md === null || typeof md !== 'object' || Array.isArray(md))) throw new FormError('Metadata: a JSON object of strings.');
  return md;
}

export async function vaultEditPage(main, vaultID) {
  const v = vaultID ? await get(`/v1/vaults/${esc(vaultID)}`) : null;
  const name = text('vault-name', v ? v.display_name : '');
  const metadata = area('vault-metadata', json(v && v.metadata), 3, {class: 'mono', placeholder: '{"team": "support"}'});
  async function send() {
    const md = metadataOf(metadata);
    if (!v) {
      const created = await post('/v1/vaults', {display_name: name.value, metadata: md});
      location.hash = `#/vaults/${esc(created.id)}`;
      return;
    }
    const body = {};
    if (name.value !== v.display_name) body.display_name = name.value;
    const patch = metadataPatch(v.metadata || {}, md || {});
    if (patch) body.metadata = patch;
    await post(`/v1/vaults/${esc(v.id)}`, body);
    location.hash = `#/vaults/${esc(v.id)}`;
  }
  const back = v ? `#/vaults/${esc(v.id)}` : '#/vaults';
  clear(main,
    crumbs(h('a', {href: '#/vaults'}, 'Vaults'), ' / ',
      v ? [h('a', {href: back, class: 'mono'}, v.id), ' / edit'] : 'new'),
    h('div', {class: 'page-head'}, h('h1', null, v ? `Edit ${v.display_name || v.id}` : 'New vault')),
    form('vault-form', [row('Name', name), row('Metadata (JSON object)', metadata)], v ? 'Save' : 'Create vault', send, back));
  name.focus();
  return {keys: {}};
}

// secret is a write-only field: a password input that starts empty and is never given a value from the API.
function secret(id, placeholder) {
  return h('input', {type: 'password', id, name: id, autocomplete: 'new-password', spellcheck: 'false', placeholder: placeholder || '',
    dataset: {secret: ''}});
}

// credentialEditPage adds a credential to a vault (credID empty) or edits one: its name and metadata, a new
// secret (blank keeps the stored one), and the settings the API lets change. What a credential is for (its MCP
// server or variable name) and its type are fixed once created.
export async function credentialEditPage(main, vaultID, credID) {
  const [v, c] = await Promise.all([get(`/v1/vaults/${esc(vaultID)}`),
    credID ? get(`/v1/vaults/${esc(vaultID)}/credentials/${esc(credID)}`) : null]);
  const a = (c && c.auth) || {type: 'environment_variable'};
  const net = a.networking || {type: 'unrestricted'};
  const loc = a.injection_location || {header: true, body: false};
  const f = {
    name: text('cred-name', c ? (c.display_name || '') : ''),
    type: h('select', {id: 'cred-type', disabled: !!c},
      h('option', {value: 'environment_variable'}, 'environment_variable: a secret the sandbox sees as a placeholder'),
      h('option', {value: 'static_bearer'}, 'static_bearer: a bearer token for an MCP server'),
      h('option', {value: 'mcp_oauth'}, 'mcp_oauth: an OAuth access token for an MCP server')),
    url: text('cred-mcp-url', a.mcp_server_url || '', {class: 'mono', placeholder: 'https://mcp.example.com/mcp', disabled: !!c}),
    oauthURL: text('cred-oauth-url', a.mcp_server_url || '', {class: 'mono', placeholder: 'https://mcp.example.com/mcp', disabled: !!c}),
    token: secret('cred-token', c ? 'Blank keeps the stored token' : ''),
    access: secret('cred-access-token', c ? 'Blank keeps the stored token' : ''),
    expires: text('cred-expires-at', a.expires_at || '', {class: 'mono', placeholder: '2026-12-31T00:00:00Z'}),
    refresh: area('cred-refresh', '', 4, {class: 'mono', autocomplete: 'off', dataset: {secret: ''},
      placeholder: '{"client_id": "…", "token_endpoint": "https://…", "refresh_token": "…", "token_endpoint_auth": {"type": "none"}}'}),
    secretName: text('cred-secret-name', a.secret_name || '', {class: 'mono', placeholder: 'GITHUB_TOKEN', disabled: !!c}),
    secretValue: secret('cred-secret-value', c ? 'Blank keeps the stored value' : ''),
    networking: h('select', {id: 'cred-networking'}, h('option', {value: 'unrestricted'}, 'unrestricted: any host'),
      h('option', {value: 'limited'}, 'limited: only the hosts listed')),
    hosts: area('cred-hosts', (net.allowed_hosts || []).join('\n'), 3, {class: 'mono', placeholder: 'api.github.com'}),
    header: h('input', {type: 'checkbox', id: 'cred-in-header', checked: !!loc.header}),
    body: h('input', {type: 'checkbox', id: 'cred-in-body', checked: !!loc.body}),
    metadata: area('cred-metadata', json(c && c.metadata), 3, {class: 'mono', placeholder: '{"owner": "ops"}'}),
  };
  f.type.value = a.type;
  f.networking.value = net.type;
  const hostsRow = row('Hosts it may be sent to (one a line)', f.hosts);
  const groups = {
    static_bearer: h('fieldset', {class: 'sub-fields', id: 'cred-static-bearer'}, h('legend', null, 'Bearer token'),
      row('MCP server URL', f.url), row('Token (write-only)', f.token)),
    mcp_oauth: h('fieldset', {class: 'sub-fields', id: 'cred-mcp-oauth'}, h('legend', null, 'OAuth'),
      row('MCP server URL', f.oauthURL), row('Access token (write-only)', f.access), row('Expires at (RFC 3339, optional)', f.expires),
      row('Refresh (JSON, write-only, optional)', f.refresh, c ? 'Blank keeps the stored refresh settings.' : 'How the server refreshes the token; it holds secrets, so it is never shown back.')),
    environment_variable: h('fieldset', {class: 'sub-fields', id: 'cred-env-var'}, h('legend', null, 'Environment variable'),
      row('Variable name', f.secretName), row('Value (write-only)', f.secretValue),
      row('Networking', f.networking), hostsRow,
      h('div', {class: 'form-row'}, h('span', {class: 'hint'}, 'Where the placeholder is replaced by the value'),
        h('label', {class: 'check'}, f.header, ' Request headers'), h('label', {class: 'check'}, f.body, ' Request bodies'))),
  };
  const sync = () => {
    for (const [t, g] of Object.entries(groups)) g.hidden = t !== f.type.value;
    hostsRow.hidden = f.networking.value !== 'limited';
  };
  f.type.addEventListener('change', sync);
  f.networking.addEventListener('change', sync);
  sync();
  const secrets = [f.token, f.access, f.secretValue, f.refresh];
  const netOf = () => f.networking.value === 'limited' ? {type: 'limited', allowed_hosts: lines(f.hosts.value)} : {type: 'unrestricted'};
  async function send() {
    const md = metadataOf(f.metadata);
    const refresh = parseJSON('Refresh', f.refresh.value);
    const t = f.type.value;
    const auth = {type: t};
    const set = (k, el) => { if (el.value !== '') auth[k] = el.value; };
    if (!c) {
      if (t === 'static_bearer') { auth.mcp_server_url = f.url.value.trim(); auth.token = f.token.value; }
      if (t === 'mcp_oauth') {
        auth.mcp_server_url = f.oauthURL.value.trim(); auth.access_token = f.access.value;
        if (f.expires.value.trim()) auth.expires_at = f.expires.value.trim();
        if (refresh !== undefined) auth.refresh = refresh;
      }
      if (t === 'environment_variable') {
        auth.secret_name = f.secretName.value.trim(); auth.secret_value = f.secretValue.value; auth.networking = netOf();
        auth.injection_location = {header: f.header.checked, body: f.body.checked};
      }
    } else {
      if (t === 'static_bearer') set('token', f.token);
      if (t === 'mcp_oauth') {
        set('access_token', f.access);
        const exp = f.expires.value.trim();
        if (exp !== (a.expires_at || '')) auth.expires_at = exp || null;
        if (refresh !== undefined) auth.refresh = refresh;
      }
      if (t === 'environment_variable') {
        set('secret_value', f.secretValue);
        const n = netOf();
        if (JSON.stringify(n) !== JSON.stringify(net.type === 'limited' ? {type: 'limited', allowed_hosts: net.allowed_hosts || []} : {type: 'unrestricted'})) auth.networking = n;
        if (f.header.checked !== !!loc.header || f.body.checked !== !!loc.body) auth.injection_location = {header: f.header.checked, body: f.body.checked};
      }
    }
    const body = {};
    if (!c) {
      body.auth = auth;
      if (f.name.value) body.display_name = f.name.value;
      if (md !== undefined) body.metadata = md;
    } else {
      if (Object.keys(auth).length > 1) body.auth = auth;
      if (f.name.value !== (c.display_name || '')) body.display_name = f.name.value;
      const patch = metadataPatch(c.metadata || {}, md || {});
      if (patch) body.metadata = patch;
    }
    const path = c ? `/v1/vaults/${esc(v.id)}/credentials/${esc(c.id)}` : `/v1/vaults/${esc(v.id)}/credentials`;
    await post(path, body);
    // Sent: the secrets leave the page now (a refusal keeps what the user typed, to correct it).
    for (const s of secrets) s.value = '';
    location.hash = `#/vaults/${esc(v.id)}`;
  }
  const back = `#/vaults/${esc(v.id)}`;
  const cpath = c && `/v1/vaults/${esc(v.id)}/credentials/${esc(c.id)}`;
  // Validate probes the credential against its MCP server (mcp_oauth_validate) and shows the answer as text: the
  // status, the step that failed with the server's answer, and how a refresh went.
  const checked = h('div', {class: 'notice', id: 'cred-validation', role: 'status', hidden: true});
  const answer = r => r ? ` HTTP ${r.status_code}${r.body ? `: ${r.body.slice(0, 300)}${r.body_truncated || r.body.length > 300 ? '…' : ''}` : ''}` : ' no HTTP answer (could not connect)';
  async function validate() {
    checked.hidden = false;
    checked.textContent = 'Validating…';
    try {
      const r = await post(`${cpath}/mcp_oauth_validate`, {});
      clear(checked, h('strong', null, `Status: ${r.status}`), ` · refresh token: ${r.has_refresh_token ? 'yes' : 'no'} · validated `, time(r.validated_at),
        r.mcp_probe ? h('p', {class: 'mono'}, `Failed at ${r.mcp_probe.method}:`, answer(r.mcp_probe.http_response)) : null,
        r.refresh ? h('p', {class: 'mono'}, `Refresh ${r.refresh.status}`, r.refresh.http_response ? [':', answer(r.refresh.http_response)] : '') : null);
    } catch (e) {
      checked.textContent = e.message;
    }
  }
  clear(main,
    crumbs(h('a', {href: '#/vaults'}, 'Vaults'), ' / ',
      h('a', {href: back}, v.display_name || v.id), ' / ', c ? mono(c.id) : 'new credential'),
    h('div', {class: 'page-head'}, h('h1', null, c ? `Edit ${c.display_name || credentialTarget(c)}` : 'Add a credential'),
      c ? [h('span', {class: 'spacer'}), c.auth.type === 'environment_variable' || c.archived_at ? null : h('button', {type: 'button', class: 'small', id: 'validate-credential', onclick: validate}, 'Validate'),
        c.archived_at ? null : gone('Archive', cpath, back, 'archive-credential', 'Click again to archive: sessions stop using it'),
        gone('Delete', cpath, back, 'delete-credential')] : null),
    c ? checked : null,
    c ? h('p', {class: 'lead'}, 'Secrets are write-only: the fields below never show the stored ones. Leave a secret blank to keep it.') : null,
    form('cred-form', [row('Name', f.name), row('Type', f.type, c ? 'A credential keeps its type.' : null),
      Object.values(groups), row('Metadata (JSON object)', f.metadata)], c ? 'Save' : 'Add credential', send, back));
  f.name.focus();
  return {keys: {}};
}
