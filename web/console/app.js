// The supervisors' console: live calls over the event stream, hotspots, orders with SLA timers,
// trends and health. No framework: DOM built with the helper `el`, charts drawn as SVG.
const $ = (sel) => document.querySelector(sel);
const SVG = 'http://www.w3.org/2000/svg';
let session = null;
let token = sessionStorage.getItem('hotline_key') || '';

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'data') for (const [dk, dv] of Object.entries(v)) e.dataset[dk] = dv;
    else e.setAttribute(k, v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) e.append(c);
  return e;
}

function headers() { return token ? { Authorization: `Bearer ${token}` } : {}; }

async function api(path, options = {}) {
  const r = await fetch(path, { ...options, headers: { ...headers(), ...(options.headers || {}) } });
  const body = r.headers.get('content-type')?.includes('json') ? await r.json() : await r.text();
  if (!r.ok) {
    if (r.status === 401 || r.status === 403) $('#token-form').hidden = false;
    throw new Error(body.message || `HTTP ${r.status}`);
  }
  return body;
}

function showError(e) {
  const box = $('#error');
  if (!e) { box.hidden = true; return; }
  box.textContent = e.message || String(e);
  box.hidden = false;
}

const fmtTime = (iso) => iso ? new Date(iso).toLocaleString('zh-CN', { hour12: false }) : '';
const intentName = (id) => session?.intents?.[id]?.zh || id || '—';

function fmtLeft(seconds) {
  const s = Math.abs(Math.round(seconds));
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
  const text = h > 0 ? `${h}h ${String(m).padStart(2, '0')}m` : `${m}m ${String(s % 60).padStart(2, '0')}s`;
  return seconds < 0 ? `overdue ${text}` : `${text} left`;
}

// ---- live calls ----
const calls = new Map();  // call_id -> element

function callCard(id) {
  let card = calls.get(id);
  if (!card) {
    card = el('div', { class: 'call', data: { call: id } },
      el('div', {}, el('b', {}, id), ' ', el('span', { class: 'status badge' }, 'in call')),
      el('div', { class: 'turns' }));
    calls.set(id, card);
    $('#calls').prepend(card);
  }
  $('#call-count').textContent = calls.size;
  return card;
}

function addTurn(t) {
  const card = callCard(t.call_id);
  const badges = [];
  if (t.handoff) { badges.push(el('span', { class: 'badge amber' }, '转人工 hand-off')); card.classList.add('handoff'); }
  if (t.transfer_to) {
    badges.push(el('span', { class: 'badge red' }, `紧急转接 ${t.transfer_to}`));
    card.classList.add('transfer');
  }
  if (t.work_order_id) {
    badges.push(el('a', { class: 'badge blue', onclick: () => openOrder(t.work_order_id) },
      `${t.merged ? '并单' : '工单'} ${t.work_order_id}`));
  }
  const slots = (t.slots || []).map((s) => `${s.type}=${s.normalized || s.value}`).join(' ');
  card.querySelector('.turns').append(el('div', { class: 'turn' },
    el('div', { class: 'said' }, '☎ ', t.text),
    el('div', { class: 'nlu' },
      `NLU ${intentName(t.nlu.intent)} (${t.nlu.intent || '—'}, ${(t.nlu.confidence * 100).toFixed(0)}%)`,
      ` · dialog ${t.action} · ${intentName(t.intent)}${t.department ? ' → ' + t.department : ''}`,
      slots ? ` · ${slots}` : ''),
    el('div', {}, '↳ ', t.reply, ' ', badges)));
  card.querySelector('.status').textContent = t.done ? 'done' : 'in call';
  // A finished call whose end never comes (the caller hung up) leaves the board after 2 minutes.
  clearTimeout(card.retire);
  if (t.done) card.retire = setTimeout(() => endCall({ call_id: t.call_id, outcome: 'done', turns: card.querySelectorAll('.turn').length, work_order_id: t.work_order_id }), 120000);
}

function endCall(e) {
  const card = calls.get(e.call_id);
  if (card) { clearTimeout(card.retire); card.remove(); calls.delete(e.call_id); }
  $('#call-count').textContent = calls.size;
  const list = $('#ended');
  list.prepend(el('li', { data: { call: e.call_id } },
    `${e.call_id}: ${e.outcome}, ${e.turns} turns`,
    e.work_order_id ? el('span', {}, ' · ', el('a', { onclick: () => openOrder(e.work_order_id) }, e.work_order_id)) : null));
  while (list.children.length > 15) list.lastChild.remove();
}

// ---- hotspots and duplicates ----
function renderHotspots(list) {
  const box = $('#hotspots');
  box.replaceChildren();
  $('#hotspot-count').textContent = list.length;
  $('#hotspot-count').className = list.length ? 'badge red' : 'badge';
  if (!list.length) { box.append(el('p', { class: 'muted' }, 'No hotspot.')); return; }
  for (const h of list) {
    const orders = el('ul', { class: 'compact', hidden: '' },
      h.order_ids.map((id) => el('li', {}, el('a', { onclick: () => openOrder(id) }, id))));
    box.append(el('div', { class: 'alert', data: { hotspot: h.key, count: h.count } },
      el('b', {}, `⚠ ${h.group_name} × ${h.count}`), ' ',
      `${h.district || ''}${h.street || ''}`, ' ',
      el('span', { class: 'muted' }, `${fmtTime(h.first_at)} – ${fmtTime(h.last_at)} · rule ${h.rule}`), ' ',
      el('a', { onclick: () => { orders.hidden = !orders.hidden; } }, 'orders'),
      orders));
  }
}

async function loadDuplicates() {
  const r = await api('/v1/console/hotspots');
  const box = $('#duplicates');
  box.replaceChildren();
  if (!r.duplicates.length) { box.append(el('p', { class: 'muted' }, 'None.')); return; }
  for (const d of r.duplicates) {
    const [into, ...rest] = d.order_ids;
    box.append(el('div', { class: 'call' },
      `${d.intent_name || d.intent} · ${d.district}${d.street}${d.number}号: `,
      d.order_ids.map((id) => el('span', {}, el('a', { onclick: () => openOrder(id) }, id), ' ')),
      el('button', { onclick: () => merge(into, rest) }, `并单 into ${into}`)));
  }
}

async function merge(into, others) {
  try {
    for (const from of others) {
      await api('/v1/console/merge', { method: 'POST', headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ into, from }) });
    }
    await Promise.all([loadDuplicates(), loadOrders()]);
  } catch (e) { showError(e); }
}

// ---- orders, SLA timers, detail ----
let orderRows = [];  // [{row, deadline}] for the SLA ticker
let ordersAsked = 0;  // only the newest request's answer is shown (answers may cross)

async function loadOrders() {
  const asked = ++ordersAsked;
  const form = new FormData($('#filter'));
  const q = new URLSearchParams();
  for (const [k, v] of form) if (v) q.set(k, v);
  q.set('limit', '50');
  const r = await api(`/v1/console/orders?${q}`);
  if (asked !== ordersAsked) return;
  const body = $('#orders tbody');
  body.replaceChildren();
  orderRows = [];
  for (const o of r.orders) {
    const sla = el('td', { class: 'sla' }, o.sla.state);
    const row = el('tr', { class: o.sla.state, data: { order: o.id }, onclick: () => openOrder(o.id) },
      el('td', {}, o.id), el('td', {}, fmtTime(o.created_at)),
      el('td', {}, `${o.category_name || ''} / ${o.intent_name || o.intent}`),
      el('td', {}, `${o.district}${o.street}`), el('td', {}, o.status), sla);
    body.append(row);
    if (['on_time', 'due_soon', 'overdue'].includes(o.sla.state)) {
      orderRows.push({ row, sla, deadline: Date.parse(o.sla.deadline), hours: o.sla.hours });
    }
  }
  tickSla();
}

function tickSla() {
  const now = Date.now();
  const soon = session?.sla?.due_soon_fraction ?? 0.2;
  for (const r of orderRows) {
    const left = (r.deadline - now) / 1000;
    const state = left < 0 ? 'overdue' : left < soon * r.hours * 3600 ? 'due_soon' : 'on_time';
    r.row.className = state;
    r.sla.textContent = fmtLeft(left);
  }
}

async function openOrder(id) {
  try {
    const o = await api(`/v1/console/orders/${encodeURIComponent(id)}`);
    const box = $('#detail');
    const status = el('select', { name: 'status' }, session.statuses.map((s) => {
      const opt = el('option', { value: s }, s);
      if (s === o.status) opt.selected = true;
      return opt;
    }));
    const note = el('input', { name: 'note', placeholder: 'note' });
    box.replaceChildren(
      el('h3', {}, `${o.id} · ${o.intent_name} · ${o.department_name || o.department}`),
      el('div', {}, `${o.district}${o.street} · created ${fmtTime(o.created_at)} · SLA ${o.sla.hours}h, deadline ${fmtTime(o.sla.deadline)} (${o.sla.state})`),
      el('div', { class: 'muted' }, session.pii ? 'personal values shown (read_orders)' : 'personal values masked'),
      el('h3', {}, 'Transcript'), el('pre', { class: 'transcript' }, o.transcript.join('\n')),
      el('h3', {}, 'Slots'), el('div', {}, o.slots.map((s) => `${s.type}: ${s.value}`).join(' · ')),
      el('h3', {}, 'Summary'), el('pre', {}, o.summary),
      el('h3', {}, 'Notes'), el('ul', { class: 'compact' }, o.notes.map((n) => el('li', {}, `${fmtTime(n.at)} ${n.by}: ${n.status ? '[' + n.status + '] ' : ''}${n.text}`))),
      el('form', { onsubmit: async (ev) => {
        ev.preventDefault();
        try {
          await api(`/v1/work-orders/${encodeURIComponent(o.id)}`, { method: 'PATCH',
            headers: { 'Content-Type': 'application/json' },
            body: JSON.stringify({ status: status.value, note: note.value }) });
          await Promise.all([openOrder(o.id), loadOrders()]);
        } catch (e) { showError(e); }
      } }, status, note, el('button', {}, 'Update')));
    box.hidden = false;
  } catch (e) { showError(e); }
}

// ---- trends (SVG) ----
const COLORS = ['#0969da', '#cf222e', '#1a7f37', '#bf8700', '#8250df', '#1b7c83', '#bc4c00', '#6e7781'];

async function loadTrends() {
  const bucket = $('#trend-bucket').value, by = $('#trend-by').value;
  const t = await api(`/v1/console/trends?bucket=${bucket}&by=${by}`);
  const svg = $('#trend');
  svg.replaceChildren();
  const keys = Object.keys(t.series).sort((a, b) =>
    t.series[b].reduce((x, y) => x + y, 0) - t.series[a].reduce((x, y) => x + y, 0)).slice(0, 8);
  const n = t.starts.length, W = 640, H = 220, L = 30, B = 20;
  const max = Math.max(1, ...keys.flatMap((k) => t.series[k]));
  const x = (i) => L + (i + 0.5) * (W - L - 4) / n, y = (v) => H - B - v * (H - B - 8) / max;
  const add = (tag, attrs, text) => {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    svg.append(e);
  };
  add('line', { x1: L, y1: H - B, x2: W, y2: H - B, stroke: '#999' });
  add('line', { x1: L, y1: 8, x2: L, y2: H - B, stroke: '#999' });
  add('text', { x: 2, y: 14, 'font-size': 10 }, String(max));
  add('text', { x: 2, y: H - B, 'font-size': 10 }, '0');
  const step = Math.ceil(n / 8);
  t.starts.forEach((s, i) => {
    if (i % step) return;
    const d = new Date(s);
    add('text', { x: x(i) - 12, y: H - 4, 'font-size': 10 },
      bucket === 'hour' ? `${d.getHours()}:00` : `${d.getMonth() + 1}/${d.getDate()}`);
  });
  const legend = $('#trend-legend');
  legend.replaceChildren();
  keys.forEach((k, j) => {
    const pts = t.series[k].map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(' ');
    add('polyline', { points: pts, fill: 'none', stroke: COLORS[j], 'stroke-width': 2, 'data-series': k });
    const swatch = el('i');
    swatch.style.background = COLORS[j];
    legend.append(el('span', {}, swatch, `${t.names[k] || k} (${t.series[k].reduce((a, b) => a + b, 0)})`));
  });
  if (!keys.length) add('text', { x: W / 2 - 40, y: H / 2, fill: '#6e7781' }, 'no orders yet');
}

// ---- health: models from the console API; queue depth and P99 from /metrics ----
let lastBuckets = null;

function parseMetrics(text) {
  const out = [];
  for (const line of text.split('\n')) {
    const m = line.match(/^([a-z_:]+)(\{([^}]*)\})? ([0-9.eE+-]+|NaN|\+Inf)$/);
    if (!m) continue;
    const labels = {};
    for (const kv of (m[3] || '').matchAll(/(\w+)="([^"]*)"/g)) labels[kv[1]] = kv[2];
    out.push({ name: m[1], labels, value: Number(m[4]) });
  }
  return out;
}

// P99 over the interval since the previous scrape, from the histogram's cumulative buckets.
function p99(buckets, previous) {
  const le = new Map();
  for (const b of buckets) le.set(b.labels.le, (le.get(b.labels.le) || 0) + b.value);
  if (previous) for (const b of previous) le.set(b.labels.le, le.get(b.labels.le) - b.value);
  const sorted = [...le.entries()].map(([k, v]) => [k === '+Inf' ? Infinity : Number(k), v]).sort((a, b) => a[0] - b[0]);
  const total = sorted.length ? sorted[sorted.length - 1][1] : 0;
  if (total <= 0) return null;
  for (const [bound, count] of sorted) if (count >= 0.99 * total) return bound;
  return null;
}

async function loadHealth() {
  const h = await api('/v1/console/health');
  $('#models tbody').replaceChildren(...h.models.map((m) => el('tr', { data: { model: m.name } },
    el('td', {}, m.name), el('td', {}, m.state), el('td', {}, m.precision || '—'),
    el('td', {}, m.memory_bytes ? `${(m.memory_bytes / 1048576).toFixed(0)} MiB` : '—'))));
  const rows = [['ready', h.ready ? 'yes' : 'no'], ['event streams', h.streams],
    ['hotspots computed', fmtTime(h.hotspots_computed_at)]];
  if (h.refresh_error) rows.push(['refresh error', h.refresh_error]);
  try {
    const metrics = parseMetrics(await api('/metrics'));
    const queue = metrics.filter((m) => m.name === 'hotline_queue_depth').reduce((a, m) => a + m.value, 0);
    const buckets = metrics.filter((m) => m.name === 'hotline_request_duration_seconds_bucket');
    const p = p99(buckets, lastBuckets);
    lastBuckets = buckets;
    const overdue = metrics.filter((m) => m.name === 'hotline_orders_overdue').reduce((a, m) => a + m.value, 0);
    rows.push(['queue depth', queue], ['P99 (last 5 s)', p === null ? 'no requests' : p === Infinity ? '> largest bucket' : `≤ ${(p * 1000).toFixed(0)} ms`],
      ['overdue orders', overdue]);
  } catch (e) { rows.push(['metrics', e.message]); }
  $('#health').replaceChildren(...rows.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, String(v))]));
}

// ---- the event stream: fetch + ReadableStream, so the API key travels in a header ----
async function stream() {
  for (;;) {
    try {
      const r = await fetch('/v1/console/events', { headers: headers() });
      if (!r.ok) throw new Error((await r.json()).message || `HTTP ${r.status}`);
      $('#conn').textContent = 'live';
      $('#conn').className = 'badge on';
      const reader = r.body.getReader();
      const decoder = new TextDecoder();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += decoder.decode(value, { stream: true });
        let at;
        while ((at = buf.indexOf('\n\n')) >= 0) {
          handleEvent(buf.slice(0, at));
          buf = buf.slice(at + 2);
        }
      }
    } catch (e) { showError(e); }
    $('#conn').textContent = 'reconnecting';
    $('#conn').className = 'badge off';
    await new Promise((ok) => setTimeout(ok, 1000));
  }
}

function handleEvent(block) {
  let name = 'message', data = '';
  for (const line of block.split('\n')) {
    if (line.startsWith('event: ')) name = line.slice(7);
    else if (line.startsWith('data: ')) data += line.slice(6);
  }
  if (!data) return;
  const d = JSON.parse(data);
  if (name === 'snapshot') {
    calls.forEach((c) => c.remove());
    calls.clear();
    for (const turn of d.calls) addTurn(turn);  // every turn of each call in progress, in order
    renderHotspots(d.hotspots);
  } else if (name === 'turn') {
    addTurn(d);
    if (d.work_order_id) { refresh(loadOrders); throttled('trends', loadTrends, 2000); }
  } else if (name === 'end') {
    endCall(d);
  } else if (name === 'hotspots') {
    renderHotspots(d.hotspots);
    refresh(loadDuplicates);
  }
}

function refresh(fn) { fn().then(() => showError(null), showError); }

// Runs fn at most once per `ms` (a burst of new orders redraws the chart once).
const pending = new Set();
function throttled(name, fn, ms) {
  if (pending.has(name)) return;
  pending.add(name);
  setTimeout(() => { pending.delete(name); refresh(fn); }, ms);
}

async function main() {
  $('#token-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    token = $('#token').value.trim();
    sessionStorage.setItem('hotline_key', token);
    location.reload();
  });
  try {
    session = await api('/v1/console/session');
  } catch (e) { showError(e); return; }
  $('#who').textContent = `${session.client}${session.pii ? '' : ' · PII masked'}`;
  const status = $('#filter select[name=status]');
  for (const s of session.statuses) status.append(el('option', { value: s }, s));
  $('#filter').addEventListener('submit', (ev) => { ev.preventDefault(); refresh(loadOrders); });
  $('#trend-bucket').addEventListener('change', () => refresh(loadTrends));
  $('#trend-by').addEventListener('change', () => refresh(loadTrends));
  stream();
  refresh(loadOrders);
  refresh(loadDuplicates);
  refresh(loadTrends);
  refresh(loadHealth);
  setInterval(tickSla, 1000);
  setInterval(() => refresh(loadHealth), 5000);
  setInterval(() => refresh(loadTrends), 60000);
  document.body.dataset.ready = '1';
}

main();
