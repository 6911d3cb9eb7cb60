// The report page: reads the session's data from the JSON block and builds the DOM from it with
// textContent and setAttribute only, so no byte of the record is ever parsed as markup.
'use strict';
(function () {
  // The page times itself from navigation start (see the end of this script): the time to read
  // the file, to parse the document up to this script, then each view's build.
  const nav = performance.getEntriesByType('navigation')[0];
  const fetched = nav ? nav.responseEnd : 0;
  let lap = performance.now();
  const phases = ['fetch:' + Math.round(fetched), 'parse:' + Math.round(lap - fetched)];
  function phase(name) {
    const now = performance.now();
    phases.push(name + ':' + Math.round(now - lap));
    lap = now;
  }
  const data = JSON.parse(document.getElementById('cordon-data').textContent);
  phase('data');
  const $ = (id) => document.getElementById(id);
  const events = data.events;
  const lanes = data.lanes;
  const laneById = new Map(lanes.map((l) => [l.id, l]));

  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) e.setAttribute(k, String(attrs[k]));
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function size(n) {
    if (typeof n !== 'number') return '';
    const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return (i === 0 ? n : n.toFixed(1)) + ' ' + u[i];
  }
  function dur(ms) {
    if (typeof ms !== 'number') return '';
    if (ms < 1000) return Math.round(ms) + 'ms';
    if (ms < 60000) return (ms / 1000).toFixed(1) + 's';
    return Math.floor(ms / 60000) + 'm' + Math.round((ms % 60000) / 1000) + 's';
  }
  function quote(a) { return /^[\w@%+=:,./-]+$/.test(a) ? a : "'" + a.replace(/'/g, "'\\''") + "'"; }
  function cmdline(argv) { return Array.isArray(argv) ? argv.map((a) => quote(String(a))).join(' ') : ''; }
  function kindOf(ev) { return typeof ev.e.kind === 'string' ? ev.e.kind : ''; }
  // The event as recorded: the fields the page folded into the event's lane (they repeat the
  // process's proc.start) put back, keys in the record's (sorted) order.
  const FOLDED = [[1, 'exe'], [2, 'argv'], [4, 'argc'], [8, 'cred'], [16, 'ppid']];
  function whole(ev) {
    const entries = Object.entries(ev.e), lane = laneById.get(ev.l);
    for (const [bit, key] of FOLDED) if ((ev.f & bit) && lane) entries.push([key, lane[key]]);
    entries.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    return Object.fromEntries(entries);  // defines each key, "__proto__" included, as data
  }
  function laneName(id) {
    const l = laneById.get(id);
    if (!l || id === 0) return 'cordon';
    return String(l.exe).split('/').pop() + ' (pid ' + l.pid + ')';
  }

  // Header.
  const h = data.header;
  $('session-id').textContent = h.session;
  document.title = 'cordon session ' + h.session;
  function row(field, label, value) {
    if (value === undefined || value === null || value === '') return;
    $('summary').append(el('dt', { 'data-field': field }, label), el('dd', { 'data-field': field }, value));
  }
  let exit = h.running ? 'still running (or cordon was killed)' : 'exit ' + h.exit_code;
  if (h.signal_name) exit += ' (killed by ' + h.signal_name + ')';
  if (h.timed_out) exit += ' (timed out)';
  row('command', 'Command', cmdline(h.argv));
  row('learn', 'Mode', h.learn === true ? 'LEARN MODE (cordon run --learn): network open to every public host name, every use recorded' : '');
  row('exit', 'Exit status', exit);
  row('duration', 'Duration', dur(h.duration_ms));
  row('cpu', 'CPU time', dur(h.cpu_ms));
  row('memory', 'Peak memory', h.peak_memory ? size(h.peak_memory) : '');
  row('limits', 'Limits', h.limits);
  row('limits-hit', 'Limits hit', Array.isArray(h.limits_hit) && h.limits_hit.length ? h.limits_hit.join(', ') : 'none');
  row('workspace', 'Workspace', h.workspace);
  row('started', 'Started', h.started_at);
  row('error', 'cordon error', h.error);
  for (const line of data.policy) $('policy-lines').append(el('li', {}, line));

  // Alerts.
  const alerts = data.alerts.list;
  if (alerts.length) {
    $('alerts').hidden = false;
    for (const a of alerts) {
      const li = el('li', { class: 'alert', 'data-category': a.category, 'data-ev': a.ev }, a.text);
      if (a.count > 1) li.append(el('span', { class: 'count' }, '×' + a.count));
      li.addEventListener('click', () => select(a.ev, true));
      $('alert-list').append(li);
    }
    if (data.alerts.more) $('alert-list').append(el('li', {}, data.alerts.more + ' more'));
  }
  const notes = [];
  if (data.summarized) notes.push(data.summarized + ' ordinary events are shown by kind and time only (the page stays small)');
  if (data.omitted) notes.push(data.omitted + ' events are left out of the page');
  if (data.unparseable) notes.push(data.unparseable + ' lines of events.jsonl could not be read');
  if (data.truncated) notes.push('events.jsonl was read only in part (it is very large)');
  if (notes.length) {
    $('record-note').hidden = false;
    $('record-note').textContent = notes.join('; ') + '. `cordon log ID --json` has every event.';
  }

  phase('header');

  // Timeline: lanes in tree order. Spans and marks live in a nested SVG whose user units are
  // milliseconds across and pixels down: zooming and panning change its viewBox alone, and the
  // marks are vertical strokes that do not scale, so they stay thin at any zoom. The marks of one
  // lane, class and kind are one path (an element per event made the page slow to open); the
  // pointer finds its event by time (markAt).
  const svg = $('tl');
  const NS = svg.namespaceURI;
  const LANE = 22, TOP = 20, LABEL = 300, RIGHT = 8;
  function sv(tag, attrs, text) {
    const e = document.createElementNS(NS, tag);
    for (const k in attrs || {}) e.setAttribute(k, String(attrs[k]));
    if (text !== undefined) e.textContent = String(text);
    return e;
  }
  function markClass(ev) {
    const k = kindOf(ev);
    let c = 'other';
    if (k.startsWith('proc.')) c = 'proc';
    else if (k === 'net.dns') c = 'dns';
    else if (k === 'net.http') c = 'http';
    else if (k.startsWith('net.')) c = 'conn';
    else if (k.startsWith('fs.')) c = 'fs';
    if (ev.e && ev.e.decision === 'deny') c = 'refused';
    if (ev.a) c = 'alert';
    return c;
  }
  const tEnd = Math.max(1, data.t_end * 1.02);
  let v0 = 0, v1 = tEnd;
  const rowOf = new Map();
  lanes.forEach((l, i) => rowOf.set(l.id, i));
  const rowY = (lane) => TOP + (rowOf.has(lane) ? rowOf.get(lane) : 0) * LANE;
  const height = TOP + lanes.length * LANE + 4;
  svg.setAttribute('height', height);
  const gGrid = sv('g'), gLanes = sv('g');
  const plot = sv('svg', { id: 'tl-plot', x: LABEL, y: 0, height: height, preserveAspectRatio: 'none' });
  const gSpans = sv('g'), gMarks = sv('g', { id: 'tl-marks' });
  const selMark = sv('line', { id: 'tl-sel', visibility: 'hidden', 'vector-effect': 'non-scaling-stroke' });
  plot.append(gSpans, gMarks, selMark);
  const laneFrag = document.createDocumentFragment(), spanFrag = document.createDocumentFragment();
  lanes.forEach((l, i) => {
    const y = TOP + i * LANE;
    const g = sv('g', { class: 'lane', 'data-lane': l.id, 'data-pid': l.pid, 'data-exe': l.exe });
    if (i % 2 === 0) g.append(sv('rect', { class: 'lane-bg', x: 0, y: y, width: '100%', height: LANE }));
    const name = l.id === 0 ? 'cordon (session)' : String(l.exe).split('/').pop() + ' ' + l.pid + ': ' + cmdline(l.argv);
    const indent = Math.min(l.depth, 12);
    const label = sv('text', { class: 'lane-label', x: 4 + indent * 10, y: y + 15 },
      name.length > 44 - indent ? name.slice(0, 43 - indent) + '…' : name);
    label.append(sv('title', {}, name));
    g.append(label);
    laneFrag.append(g);
    spanFrag.append(sv('rect', { class: 'span', 'data-lane': l.id, x: l.t0, y: y + 3, height: LANE - 6,
      width: Math.max(l.t1 - l.t0, tEnd / 1000) }));
  });
  gLanes.append(laneFrag);
  gSpans.append(spanFrag);
  // One group per lane, class and kind: its events (indexes, in time order) and its path.
  const CLASS_ORDER = ['other', 'proc', 'fs', 'dns', 'conn', 'http', 'refused', 'alert'];
  const groups = new Map();
  events.forEach((ev, i) => {
    if (!ev) return;
    const cls = markClass(ev), kind = kindOf(ev), key = ev.l + '\u0000' + cls + '\u0000' + kind;
    let g = groups.get(key);
    if (!g) groups.set(key, (g = { lane: ev.l, cls: cls, kind: kind, evs: [] }));
    g.evs.push(i);
  });
  const byPath = new Map();
  const markFrag = document.createDocumentFragment();
  // Refusals and alerts last, so they are drawn over the ordinary marks.
  const ordered = [...groups.values()].sort((a, b) => CLASS_ORDER.indexOf(a.cls) - CLASS_ORDER.indexOf(b.cls));
  for (const g of ordered) {
    g.evs.sort((a, b) => events[a].t - events[b].t);
    const y = rowY(g.lane) + 4, d = [];
    for (const i of g.evs) d.push('M' + events[i].t + ' ' + y + 'v' + (LANE - 8));
    const path = sv('path', { class: 'mark ' + g.cls, 'data-kind': g.kind, 'data-lane': g.lane,
      'data-count': g.evs.length, d: d.join(''), 'vector-effect': 'non-scaling-stroke' });
    byPath.set(path, g);
    markFrag.append(path);
  }
  gMarks.append(markFrag);
  svg.append(gLanes, gGrid, plot);
  // The event of `g` nearest to the time under the pointer.
  function markAt(e) {
    const g = byPath.get(e.target);
    if (!g) return null;
    const x = e.clientX - svg.getBoundingClientRect().left - LABEL;
    const t = v0 + (x / (width() - LABEL - RIGHT)) * (v1 - v0);
    let lo = 0, hi = g.evs.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (events[g.evs[mid]].t < t) lo = mid + 1; else hi = mid;
    }
    if (lo > 0 && t - events[g.evs[lo - 1]].t < events[g.evs[lo]].t - t) lo--;
    return g.evs[lo];
  }
  function width() { return Math.max(600, svg.clientWidth || 1200); }
  function layout() {
    const w = width();
    plot.setAttribute('width', w - LABEL - RIGHT);
    plot.setAttribute('viewBox', v0 + ' 0 ' + (v1 - v0) + ' ' + height);
    gGrid.replaceChildren();
    for (let k = 0; k <= 6; k++) {
      const t = v0 + ((v1 - v0) * k) / 6, x = LABEL + ((w - LABEL - RIGHT) * k) / 6;
      gGrid.append(sv('line', { class: 'grid', x1: x, x2: x, y1: TOP - 4, y2: height }),
        sv('text', { class: 'tick', x: k === 6 ? x - 40 : x + 2, y: 12 }, dur(t)));
    }
  }
  let pending = false;
  function relayout() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => { pending = false; layout(); });
  }
  svg.addEventListener('wheel', (e) => {
    e.preventDefault();
    const w = width(), px = e.offsetX;
    const at = px > LABEL ? v0 + ((px - LABEL) / (w - LABEL - RIGHT)) * (v1 - v0) : v0;
    const f = e.deltaY < 0 ? 0.8 : 1.25;
    const span = Math.min(tEnd, Math.max(0.05, (v1 - v0) * f));
    v0 = Math.max(0, at - (at - v0) * (span / (v1 - v0)));
    v1 = v0 + span;
    if (v1 > tEnd) { v0 = Math.max(0, tEnd - span); v1 = v0 + span; }
    relayout();
  }, { passive: false });
  let drag = null;
  svg.addEventListener('mousedown', (e) => { drag = { x: e.clientX, v0: v0, v1: v1 }; });
  window.addEventListener('mouseup', () => { drag = null; });
  window.addEventListener('mousemove', (e) => {
    if (!drag) return;
    const dt = ((e.clientX - drag.x) / (width() - LABEL - RIGHT)) * (drag.v1 - drag.v0);
    const span = drag.v1 - drag.v0;
    v0 = Math.min(Math.max(0, drag.v0 - dt), Math.max(0, tEnd - span));
    v1 = v0 + span;
    relayout();
  });
  window.addEventListener('resize', relayout);
  $('zoom-reset').addEventListener('click', () => { v0 = 0; v1 = tEnd; relayout(); });
  for (const c of ['proc', 'conn', 'http', 'dns', 'fs', 'refused', 'alert']) {
    $('legend').append(el('span', { class: 'key ' + c }), document.createTextNode(c));
  }
  gMarks.addEventListener('mousemove', (e) => {
    const i = markAt(e);
    const ev = i === null ? null : events[i];
    if (ev) $('hover').textContent = kindOf(ev) + ' — ' + laneName(ev.l) + ' — ' + dur(ev.t);
  });

  function select(i, scroll) {
    const ev = events[i];
    if (!ev) return;
    const y = rowY(ev.l);
    for (const [k, v] of [['class', 'mark sel ' + markClass(ev)], ['data-ev', i], ['x1', ev.t], ['x2', ev.t],
      ['y1', y + 2], ['y2', y + LANE - 2], ['visibility', 'visible']]) selMark.setAttribute(k, String(v));
    $('event-title').textContent = kindOf(ev) + ' — ' + laneName(ev.l) + ' — ' + dur(ev.t);
    $('event-json').textContent = JSON.stringify(whole(ev), null, 2) +
      (ev.c ? '\n(cut to fit the page: `cordon log ' + h.session + ' --json` has the whole event)' : '');
    if (scroll) $('event-box').scrollIntoView({ block: 'nearest' });
  }
  gMarks.addEventListener('click', (e) => {
    const i = markAt(e);
    if (i !== null) select(i, false);
  });

  phase('timeline');

  // Network table, refusals first (the order the data comes in).
  const net = data.network;
  $('net-note').textContent = net.rows.length ? (net.more ? net.more + ' more events on further hosts are not listed' : '')
    : 'No connections or lookups went through cordon\'s proxy.';
  // Rows are built off the document and appended once; one listener per table finds the row's
  // event.
  function onRowClick(table) {
    table.tBodies[0].addEventListener('click', (e) => {
      const tr = e.target.closest('tr[data-ev]');
      if (tr) select(Number(tr.getAttribute('data-ev')), true);
    });
  }
  const netRows = document.createDocumentFragment();
  for (const r of net.rows) {
    const tr = el('tr', { class: 'net-row ' + r.decision, 'data-host': r.host, 'data-port': r.port,
      'data-decision': r.decision, 'data-ev': r.ev });
    tr.append(el('td', { class: 'host' }, r.host), el('td', {}, r.port),
      el('td', { class: 'decision-' + (r.decision === 'allow' ? 'allow' : 'deny') }, r.decision),
      el('td', {}, r.rules.join(', ')), el('td', {}, r.connections), el('td', {}, r.requests),
      el('td', {}, r.refused), el('td', {}, r.dns), el('td', {}, size(r.bytes_out)),
      el('td', {}, size(r.bytes_in)), el('td', { class: 'process' }, r.lane ? laneName(r.lane) : ''),
      el('td', {}, r.reason));
    netRows.append(tr);
  }
  $('net-table').tBodies[0].append(netRows);
  onRowClick($('net-table'));

  phase('network');

  // Files.
  const files = data.files || {};
  const changes = files.changes || [];
  const count = (k) => changes.filter((c) => c.kind === k).length;
  if (!files.available) {
    $('files-note').textContent = files.note || 'No copy-on-write changes to show.';
  } else {
    $('files-note').textContent = changes.length + ' changes against ' + files.workspace + ': ' +
      count('added') + ' added, ' + count('modified') + ' modified, ' + count('deleted') +
      ' deleted, ' + count('renamed') + ' renamed' + (files.more ? ' (and ' + files.more + ' more)' : '') +
      (files.running ? ' (the session still runs: this is its state now)' : '') + (files.note ? '. ' + files.note : '');
  }
  const types = { d: '/', l: ' (symlink)', p: ' (fifo)', s: ' (socket)', c: ' (device)', b: ' (device)' };
  const changeRows = document.createDocumentFragment();
  for (const c of changes) {
    const tr = el('tr', { class: 'file-change' + (c.protected ? ' protected' : ''), 'data-kind': c.kind,
      'data-path': c.path, 'data-protected': c.protected ? 'yes' : 'no' });
    const name = (c.from ? c.from + ' → ' : '') + c.path + (types[c.type] || '');
    const sz = c.type !== 'f' ? '' : c.kind === 'added' || c.kind === 'renamed' ? size(c.size)
      : c.kind === 'deleted' ? size(c.old_size) : size(c.old_size) + ' → ' + size(c.size);
    const mode = c.kind === 'deleted' ? '' : (c.mode & 0o7777).toString(8).padStart(4, '0');
    tr.append(el('td', {}, c.kind), el('td', { class: 'path' }, name), el('td', {}, sz), el('td', {}, mode),
      el('td', { class: 'flag' }, c.protected ? 'protected: ' + c.rule + ' (commit leaves it out unless named)'
        : c.binary ? 'binary' : ''));
    changeRows.append(tr);
    if (typeof c.diff === 'string') {
      const td = el('td', { colspan: 5 });
      const det = el('details', { class: 'diff', 'data-path': c.path });
      det.append(el('summary', {}, 'diff of ' + c.path));
      const pre = el('pre', { class: 'diff' });
      for (const line of c.diff.split('\n')) {
        const cls = line[0] === '+' ? 'diff-add' : line[0] === '-' ? 'diff-del' : line[0] === '@' ? 'diff-hunk' : '';
        pre.append(el('span', cls ? { class: cls } : {}, line + '\n'));
      }
      det.append(pre);
      td.append(det);
      const dr = el('tr', { class: 'diff-row' });
      dr.append(td);
      changeRows.append(dr);
    }
  }
  $('file-changes').tBodies[0].append(changeRows);
  const refusals = data.fs_refusals;
  $('fs-refusals-note').textContent = refusals.length ? '' : 'None.';
  const refusalRows = document.createDocumentFragment();
  for (const r of refusals) {
    const tr = el('tr', { class: 'fs-refusal', 'data-path': r.path, 'data-ev': r.ev });
    tr.append(el('td', { class: 'path' }, r.path), el('td', {}, r.op), el('td', {}, r.rule),
      el('td', {}, laneName(r.lane)), el('td', {}, r.source));
    refusalRows.append(tr);
  }
  $('fs-refusals').tBodies[0].append(refusalRows);
  onRowClick($('fs-refusals'));
  phase('files');
  // The timeline's width needs a layout of the whole page: asked once, now that every view is
  // built (asked before the tables, it cost a second one). That layout, and the style the browser
  // would work out before the first paint anyway, is timed here too. bench/report/open_time.py
  // reads both attributes below from Chromium's DOM.
  layout();
  phase('layout');
  document.documentElement.setAttribute('data-rendered-ms', Math.round(performance.now()));
  document.documentElement.setAttribute('data-render-phases', phases.join(' '));
})();
