// envoy-rls console. Every value from the server is written with
// textContent (through el), never parsed as HTML: a descriptor value may
// carry markup or script, and must show as text.
'use strict';

const csrf = document.querySelector('meta[name="console-csrf"]').content;
const byId = (id) => document.getElementById(id);

// el builds an element; string children become text nodes.
function el(tag, cls, ...children) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function replace(node, ...children) {
  node.replaceChildren(...children);
}

function row(cells, cls) {
  const tr = el('tr', cls);
  for (const c of cells) {
    tr.append(c instanceof Node && c.tagName === 'TD' ? c : el('td', null, c));
  }
  return tr;
}

function table(head, rows) {
  const t = el('table');
  const h = el('tr');
  for (const name of head) h.append(el('th', null, name));
  t.append(el('thead', null, h));
  const b = el('tbody');
  for (const r of rows) b.append(r);
  t.append(b);
  return t;
}

function num(v, cls) {
  return el('td', 'num' + (cls ? ' ' + cls : ''), v);
}

async function getJSON(path) {
  const r = await fetch(path, { headers: { 'Accept': 'application/json' }, cache: 'no-store' });
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(body.error || (r.status + ' ' + r.statusText));
  return body;
}

const bars = '▁▂▃▄▅▆▇█';
function spark(values, cls) {
  // The last 60 seconds, scaled to their own peak.
  const v = values.slice(-60);
  const peak = Math.max(1, ...v);
  let s = '';
  for (const x of v) s += x === 0 ? ' ' : bars[Math.min(7, Math.floor((x / peak) * 7.999))];
  return el('span', 'spark' + (cls ? ' ' + cls : ''), s);
}

const sum = (a) => a.reduce((x, y) => x + y, 0);
const limitKey = (d, r, l) => d + '\u0000' + r + '\u0000' + l;

// ---- state: rules, overrides, source (every 2 s) ----
let state = null;
let rates = new Map();

function fmtTime(t) {
  if (!t || t.startsWith('0001-')) return 'never';
  return new Date(t).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

function fmtRemaining(ms) {
  if (ms <= 0) return 'expired';
  const s = Math.floor(ms / 1000);
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
  return (h ? h + 'h' : '') + (h || m ? m + 'm' : '') + (s % 60) + 's';
}

function renderSource() {
  const s = state.source;
  if (!s) { replace(byId('source')); return; }
  const parts = [el('span', null, 'Rules from ' + s.kind + ' ' + s.name + '; last good load ' + fmtTime(s.last_good) +
    ' (' + s.loads + ' loads, ' + s.errors + ' failed).')];
  if (s.last_error) {
    parts.push(el('div', 'bad', 'Last error at ' + fmtTime(s.last_error_at) + ':'));
    parts.push(el('pre', 'bad', s.last_error));
  }
  replace(byId('source'), ...parts);
}

function overridesByLimit() {
  const m = new Map();
  for (const l of (state.config && state.config.limits) || []) {
    m.set(l.domain + '\u0000' + l.rule + '\u0000' + l.limit, l);
  }
  return m;
}

function renderRules() {
  const cfg = state.config;
  if (!cfg) return;
  const views = overridesByLimit();
  const out = [];
  for (const d of cfg.domains) {
    out.push(el('h3', null, 'domain ' + d.domain + ' ', el('span', 'muted', '(' + d.source.type + ':' + d.source.name + ')')));
    const rows = [];
    for (const r of d.rules) {
      const flags = [];
      if (r.shadow_mode) flags.push('shadow');
      if (r.quota_mode) flags.push('quota');
      if (r.unlimited) flags.push('unlimited');
      if (r.replaces && r.replaces.length) flags.push('replaces ' + r.replaces.join(','));
      const limits = r.limits || [];
      if (limits.length === 0) {
        rows.push(row([r.path, '', 'unlimited', flags.join(' '), '', '', '', '', '']));
        continue;
      }
      limits.forEach((l, i) => {
        const name = l.name || r.id;
        const view = views.get(d.domain + '\u0000' + r.id + '\u0000' + (l.name || (limits.length > 1 ? r.id + '/' + l.label : r.id)));
        let ov = '';
        if (view && view.override) ov = view.override.source + ' until ' + fmtTime(view.override.expires);
        const eff = l.effective_requests_per_unit !== undefined && l.effective_requests_per_unit !== l.requests_per_unit
          ? ' → ' + l.effective_requests_per_unit : '';
        const rt = rates.get(limitKey(d.domain, r.id, l.label)) || { ok: [], over_limit: [], not_applied: [] };
        const lastOK = rt.ok.length ? rt.ok[rt.ok.length - 1] : 0;
        const lastOver = rt.over_limit.length ? rt.over_limit[rt.over_limit.length - 1] : 0;
        const tr = row([
          i === 0 ? r.path + ' (line ' + r.line + ')' : '',
          l.label,
          l.requests_per_unit + '/' + (l.unit_multiplier > 1 ? l.unit_multiplier + ' ' : '') + l.unit + eff + ' ' +
            l.algorithm + (l.burst ? ' burst ' + l.burst : '') + (l.lease ? ' lease' : ''),
          [flags.join(' '), ov].filter((x) => x).join('; '),
          num(lastOK, 'ok-rate'),
          num(lastOver, 'over-rate' + (lastOver ? ' bad' : '')),
          num(sum(rt.ok), 'ok-total'),
          num(sum(rt.over_limit), 'over-total'),
          el('td', null, spark(rt.ok), el('br'), spark(rt.over_limit, 'over')),
        ], 'limit-row');
        tr.dataset.domain = d.domain;
        tr.dataset.rule = r.id;
        tr.dataset.limit = l.label;
        tr.title = name;
        rows.push(tr);
      });
    }
    out.push(table(['descriptor path', 'limit', 'value, algorithm', 'mode, override', 'OK/s', 'over/s', 'OK 5m', 'over 5m', 'last 60 s'], rows));
  }
  replace(byId('rules'), ...out);
}

function renderOverrides() {
  const now = Date.now();
  const rows = [];
  const names = [];
  for (const l of (state.config && state.config.limits) || []) {
    names.push(el('option', null, l.limit));
    if (!l.override) continue;
    const o = l.override;
    const change = o.requests_per_unit !== undefined ? 'requests_per_unit=' + o.requests_per_unit : 'factor=' + o.factor;
    const del = el('button', 'override-delete', 'Delete');
    del.type = 'button';
    del.addEventListener('click', () => deleteOverride(o));
    const tr = row([o.domain, o.limit, o.source, change, l.configured_requests_per_unit + ' → ' + l.effective_requests_per_unit,
      fmtRemaining(new Date(o.expires).getTime() - now), o.reason, o.by || '', el('td', null, del)], 'override-row');
    tr.dataset.domain = o.domain;
    tr.dataset.limit = o.limit;
    rows.push(tr);
  }
  replace(byId('overrides').tBodies[0], ...(rows.length ? rows : [row(['no override in force'])]));
  replace(byId('override-limits'), ...names);
}

// ---- denied now and top (every second) ----
const limitName = (l) => l.domain + ' / ' + (l.limit === l.rule ? l.limit : l.rule + ' / ' + l.limit);

function setLimitData(node, l) {
  node.dataset.domain = l.domain;
  node.dataset.rule = l.rule;
  node.dataset.limit = l.limit;
  return node;
}

// renderDenied is the first panel: the limits that denied requests in the
// last minute, most denied first, each with the clients it denied most;
// the limits that denied nothing are folded into one line.
function renderDenied(page) {
  const denying = page.limits.filter((l) => l.denied > 0).sort((a, b) => b.denied - a.denied || limitName(a).localeCompare(limitName(b)));
  const quiet = page.limits.filter((l) => l.denied === 0);
  const total = sum(denying.map((l) => l.denied));
  const head = byId('denied-headline');
  head.className = denying.length ? 'bad' : 'good';
  head.replaceChildren(denying.length
    ? total + ' request' + (total === 1 ? '' : 's') + ' denied in the last minute, by ' + denying.length + ' limit' + (denying.length === 1 ? '' : 's') + ' (most denied first) '
    : 'No request denied in the last minute ',
  // The sketch counts whole buckets: "the last minute" may reach back
  // further, as far as covers says.
  el('span', 'muted', '(counted over at most ' + page.covers + ')'));
  const out = [];
  if (denying.length) {
    out.push(table(['limit', 'denied', 'seen', 'over/s now', 'clients denied most (count)'], denying.map((l) => {
      const rt = rates.get(limitKey(l.domain, l.rule, l.limit));
      const now = rt && rt.over_limit.length ? rt.over_limit[rt.over_limit.length - 1] : 0;
      const clients = el('td', 'clients');
      for (const it of l.top_denied.slice(0, 3)) {
        const c = el('span', 'client', el('span', 'value', it.value), ' ', el('span', 'muted', '×' + it.count));
        c.dataset.value = it.value;
        clients.append(c);
      }
      if (l.top_denied.length > 3) clients.append(el('span', 'muted', '+' + (l.top_denied.length - 3) + ' more below'));
      // The limit's name first; its domain and rule (when the rule is
      // not the name) under it.
      const name = el('td', 'limit-name', el('strong', null, l.limit), el('br'),
        el('span', 'muted', 'domain ' + l.domain + (l.rule === l.limit ? '' : ', rule ' + l.rule)));
      return setLimitData(row([name, num(l.denied, 'bad'), num(l.seen), num(now, now ? 'bad' : ''), clients], 'denied-row'), l);
    })));
  }
  if (quiet.length) {
    const d = el('details', 'quiet', el('summary', 'muted', quiet.length + ' limit' + (quiet.length === 1 ? '' : 's') + ' with traffic denied nothing'));
    const ul = el('ul', 'quiet-list');
    for (const l of quiet) ul.append(setLimitData(el('li', 'quiet-row', limitName(l) + ' ', el('span', 'muted', '(' + l.seen + ' seen)')), l));
    d.append(ul);
    out.push(d);
  }
  if (!page.limits.length) out.push(el('p', 'muted', 'No decisions in the last minute.'));
  // Limits past the sketch's bound are not in it: their denials are missing here.
  if (page.dropped) out.push(el('p', 'bad', page.dropped + ' decisions of limits beyond the sketch\'s bound were not tracked: their denials are not listed.'));
  replace(byId('denied'), ...out);
}

function renderTop(page) {
  byId('top-hashed').textContent = page.hashed ? 'Values are shown hashed (--console-hash-values).' : '';
  const out = [];
  const limits = page.limits.slice().sort((a, b) => b.denied - a.denied || limitName(a).localeCompare(limitName(b)));
  for (const l of limits) {
    const list = (items, err, cls) => table(['value', 'count', 'at least'], items.map((it) => {
      const tr = row([el('td', 'value', it.value), num(it.count), num(it.lower)], cls);
      tr.dataset.value = it.value;
      return tr;
    }).concat([row([el('td', 'muted', 'error ≤ ' + err)])]));
    const title = el('span', null, l.domain + ' / ' + l.rule + ' / ' + l.limit + ' ',
      el('span', 'muted', l.denied + ' denied of ' + l.seen + ' in the window (' + page.covers + ' at most)'));
    const cols = el('div', 'cols',
      el('div', 'top-denied', el('strong', null, 'most denied'), list(l.top_denied, l.denied_error, 'top-denied-row')),
      el('div', 'top-seen', el('strong', null, 'most seen'), list(l.top_seen, l.seen_error, 'top-seen-row')));
    // A limit that denied nothing is folded: its lists are one click
    // away, and the denying limits stay together at the top.
    const d = setLimitData(el('details', 'top-limit' + (l.denied ? '' : ' quiet'), el('summary', null, title), cols), l);
    d.open = l.denied > 0 || openTop.has(limitKey(l.domain, l.rule, l.limit));
    d.addEventListener('toggle', () => {
      const k = limitKey(l.domain, l.rule, l.limit);
      if (d.open && !l.denied) openTop.add(k); else openTop.delete(k);
    });
    out.push(d);
  }
  if (page.dropped) out.push(el('p', 'bad', page.dropped + ' decisions of limits beyond the sketch\'s bound were not tracked.'));
  if (!out.length) out.push(el('p', 'muted', 'No decisions in the window.'));
  replace(byId('top'), ...out);
}

// openTop holds the folded limits the reader opened, kept open across
// refreshes.
const openTop = new Set();

// ---- health (every 3 s) ----
function renderHealth(h) {
  const rows = [row(['store', h.store + ' (' + h.topology + ')'])];
  for (const s of h.shards || []) {
    rows.push(row(['node ' + s.addr, s.error ? el('td', 'bad', 'unreachable: ' + s.error) : 'round trip ' + s.rtt_ms.toFixed(2) + ' ms'], 'shard-row'));
  }
  if (h.breaker) {
    const counts = Object.entries(h.breakers || {}).map(([k, v]) => k + ' ' + v).join(', ');
    rows.push(row(['circuit breaker', el('td', h.breaker === 'closed' ? 'good' : 'bad', h.breaker + ' (shards: ' + counts + ')')]));
  }
  if (h.roundtrip_mean_ms !== undefined) rows.push(row(['Redis pipeline round trip, mean since start', h.roundtrip_mean_ms.toFixed(3) + ' ms']));
  for (const [k, v] of Object.entries(h.metrics || {}).sort()) rows.push(row([k, String(v)]));
  if (h.error) rows.push(row(['error', el('td', 'bad', h.error)]));
  replace(byId('health'), table(['', ''], rows));
}

// ---- explain ----
function parseDescriptors(text) {
  const t = text.trim();
  if (t.startsWith('{')) {
    const req = JSON.parse(t);
    return {
      domain: req.domain,
      descriptors: (req.descriptors || []).map((d) => (d.entries || []).map((e) => ({ key: String(e.key), value: String(e.value) }))),
    };
  }
  const descriptors = t.split('\n').filter((l) => l.trim()).map((line) => line.split(',').map((kv) => {
    const i = kv.indexOf('=');
    if (i < 0) throw new Error('"' + kv.trim() + '": want key=value');
    return { key: kv.slice(0, i).trim(), value: kv.slice(i + 1).trim() };
  }));
  return { descriptors };
}

async function explain(ev) {
  ev.preventDefault();
  const out = byId('explain-result');
  let req;
  try {
    req = parseDescriptors(byId('explain-descriptors').value);
    req.domain = req.domain || byId('explain-domain').value;
  } catch (e) {
    replace(out, el('p', 'bad', 'Cannot read the descriptors: ' + e.message));
    return;
  }
  const r = await fetch('api/explain', {
    method: 'POST', headers: { 'Content-Type': 'application/json', 'X-Console-CSRF': csrf }, body: JSON.stringify(req),
  });
  const rep = await r.json().catch(() => ({ error: r.status + ' ' + r.statusText }));
  if (!r.ok) { replace(out, el('p', 'bad', 'explain: ' + (rep.error || r.status))); return; }
  const parts = [];
  let over = false;
  const rows = [];
  rep.descriptors.forEach((d, i) => {
    const entries = d.entries.map((e) => e.key + '=' + e.value).join(', ');
    if (!d.rule) { rows.push(row([String(i), entries, 'no rule: ' + d.no_match, '', '', '', ''])); return; }
    const where = d.rule.id + ' (' + d.rule.file + ':' + d.rule.line + ')';
    if (d.rule.unlimited) { rows.push(row([String(i), entries, where, 'unlimited', '', '', 'OK'])); return; }
    for (const l of d.limits || []) {
      const st = l.state;
      const left = st ? (st.exists ? st.remaining : l.effective.limit) : null;
      const ok = l.replaced_by ? true : (left === null ? null : left > 0);
      const soft = d.rule.shadow_mode || d.rule.quota_mode;
      if (ok === false && !soft) over = true;
      // An overdrawn budget (cost: charge) says by how much.
      const leftText = left === null ? 'not read' : (st && st.overdraft > 0 ? '0 (overdrawn by ' + st.overdraft + ')' : String(left));
      rows.push(row([String(i), entries, where, l.label + ': ' + l.effective.limit + ' per ' + l.unit + ' (' + l.algorithm + ', ' + l.effective.source + (l.cost === 'charge' ? ', cost: charge' : '') + ')',
        l.key, leftText,
        el('td', ok === false ? 'bad' : 'good', l.replaced_by ? 'replaced by ' + l.replaced_by : ok === null ? '?' : ok ? 'OK' : (soft ? 'OVER_LIMIT (soft: answered OK)' : 'OVER_LIMIT'))]));
    }
  });
  parts.push(el('p', null, 'The next request would get ', el('strong', over ? 'bad' : 'good', over ? 'OVER_LIMIT' : 'OK'),
    rep.live ? ' (counters read live at ' + rep.at + ').' : ' (counters not read).'));
  parts[0].id = 'explain-decision';
  parts.push(table(['#', 'entries', 'rule', 'limit', 'counter key', 'remaining', 'decision'], rows));
  parts.push(el('details', null, el('summary', null, 'full explanation (JSON)'), el('pre', null, JSON.stringify(rep, null, 2))));
  replace(out, ...parts);
}

// ---- overrides ----
function overrideMsg(text, bad) {
  const m = byId('override-msg');
  m.className = bad ? 'bad' : 'good';
  m.textContent = text;
}

async function adminCall(method, query, body) {
  const headers = { 'X-Console-CSRF': csrf };
  const token = byId('override-token').value;
  if (token) headers['Authorization'] = 'Bearer ' + token;
  if (body) headers['Content-Type'] = 'application/json';
  const r = await fetch('api/overrides' + query, { method, headers, body: body ? JSON.stringify(body) : undefined });
  const text = await r.text();
  if (!r.ok) {
    let msg = text;
    try { msg = JSON.parse(text).error || text; } catch (e) { /* plain text */ }
    throw new Error(r.status + ': ' + msg.trim());
  }
  return text;
}

async function setOverride(ev) {
  ev.preventDefault();
  const body = {
    domain: byId('override-domain').value.trim(), limit: byId('override-limit').value.trim(),
    ttl: byId('override-ttl').value.trim(), reason: byId('override-reason').value, by: 'console',
  };
  const f = byId('override-factor').value.trim(), rpu = byId('override-rpu').value.trim();
  if (f !== '') body.factor = Number(f);
  if (rpu !== '') body.requests_per_unit = Number(rpu);
  try {
    await adminCall('POST', '', body);
    overrideMsg('Override set on ' + body.domain + ' ' + body.limit + '.', false);
    await refreshState();
  } catch (e) {
    overrideMsg('Refused: ' + e.message, true);
  }
}

async function deleteOverride(o) {
  const q = '?' + new URLSearchParams({ domain: o.domain, limit: o.limit, source: o.source, by: 'console', reason: 'deleted from the console' });
  try {
    await adminCall('DELETE', q);
    overrideMsg('Override on ' + o.domain + ' ' + o.limit + ' deleted.', false);
    await refreshState();
  } catch (e) {
    overrideMsg('Refused: ' + e.message, true);
  }
}

// ---- polling ----
function setStatus(text, bad) {
  const s = byId('status');
  s.className = bad ? 'bad' : 'muted';
  s.textContent = text;
}

async function refreshState() {
  state = await getJSON('api/state');
  renderSource();
  renderRules();
  renderOverrides();
}

async function refreshRates() {
  const v = await getJSON('api/rates');
  rates = new Map(v.limits.map((l) => [limitKey(l.domain, l.rule, l.limit), l]));
  if (state) renderRules();
}

async function refreshTop() {
  // "Denied now" is always the last minute; the top panel's window is the
  // reader's choice.
  const w = byId('top-window').value;
  const minute = await getJSON('/debug/top?n=10&window=1m');
  renderDenied(minute);
  renderTop(w === '1m' ? minute : await getJSON('/debug/top?n=10&window=' + encodeURIComponent(w)));
}

async function refreshHealth() {
  renderHealth(await getJSON('api/health'));
}

// poll runs f every period ms, one call at a time.
function poll(f, period) {
  const tick = async () => {
    try {
      await f();
      setStatus('updated ' + new Date().toLocaleTimeString() + ' (polling every second)', false);
    } catch (e) {
      setStatus('update failed: ' + e.message, true);
    }
    setTimeout(tick, period);
  };
  tick();
}

byId('explain-form').addEventListener('submit', explain);
byId('override-form').addEventListener('submit', setOverride);
byId('top-window').addEventListener('change', () => refreshTop().catch(() => {}));
poll(refreshState, 2000);
poll(refreshRates, 1000);
poll(refreshTop, 1000);
poll(refreshHealth, 3000);
