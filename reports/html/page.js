// moeprof report page: the per-allocation memory timeline (uPlot for axes, zoom and cursor; the
// allocation bands are drawn on its canvas), the icicle of the live set at the peak, and the
// hover details. Reads the report JSON embedded in #moeprof-data; makes no network request.
(function () {
  'use strict';
  const data = JSON.parse(document.getElementById('moeprof-data').textContent);
  const ACT = new Set(['activation', 'workspace', 'communication', 'unknown']);
  const CAT_COLOUR = {
    activation: '#2f6fde', workspace: '#e08a1e', communication: '#8e44ad', unknown: '#7a8699',
    weights: '#9aa5b8', kv_cache: '#2e9e6e', graph: '#c0392b',
  };
  const SUMMARY_COLOUR = '#c9ced8';

  // ---- numbers: the one unit policy (docs/metrics.md, "Units"), as reports/format.cpp ----
  function commas(n) { return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ','); }
  function scaled(v, unit) {
    const tenth = unit / 10;
    const q = Math.floor(v / tenth), r = v - q * tenth;
    const tenths = q + (r * 2 >= tenth ? 1 : 0);
    return commas(Math.floor(tenths / 10)) + '.' + (tenths % 10);
  }
  function fmtBytes(b) {
    if (b < 1000) return b + ' B';
    if (b < 999950) return scaled(b, 1000) + ' kB';
    return scaled(b, 1000000) + ' MB';
  }
  function fmtExact(b) { return commas(b) + ' B'; }
  function fmtAxisBytes(b) {  // axis ticks: the same units, no decimals where they add nothing
    if (b >= 1e6 && b % 1e6 === 0) return commas(b / 1e6) + ' MB';
    return fmtBytes(b);
  }
  function fmtNs(ns) {  // as format_duration_ns: each unit up to where the next one takes over
    const rounded = (unit) => Math.floor(ns / unit) + (ns % unit >= unit - Math.floor(unit / 2) ? 1 : 0);
    if (ns < 1000) return ns + ' ns';
    const us = rounded(1e3);
    if (us < 1000) return us + ' us';
    const tenths = rounded(1e5);
    if (tenths < 10000) return Math.floor(tenths / 10) + '.' + (tenths % 10) + ' ms';
    const h = rounded(1e7);
    return commas(Math.floor(h / 100)) + '.' + String(h % 100).padStart(2, '0') + ' s';
  }
  function esc(s) {
    return String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
  }
  function hash(s) { let h = 2166136261; for (let i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 16777619); } return h >>> 0; }
  // Colour of a scope family: the scope without its layer component, so every layer's attention
  // has one colour.
  function scopeFamily(scope) { return scope.split('/').filter((c) => !/^(layers?|blk|blocks?|h)[._]?\d+$/.test(c)).join('/') || scope || '(unscoped)'; }
  // The name shown for an allocation: its own, else its innermost user frame (programs traced
  // without names), else "(unnamed)"; as entry_label() in reports/report_file.h.
  function label(name, frames) {
    if (name) return name;
    const f = frames ? (Array.isArray(frames) ? frames[0] : String(frames).split('\n')[0]) : '';
    return f || '(unnamed)';
  }
  function scopeColour(scope) { const h = hash(scopeFamily(scope)); return 'hsl(' + (h % 360) + ',55%,' + (45 + (h >> 9) % 20) + '%)'; }

  // ---- one run's timeline model ----
  function makeAxis(axis) {
    const a = axis.anchors;
    return function (pos) {
      if (!a.length) return pos;
      if (pos <= a[0][0]) return a[0][1];
      let lo = 0, hi = a.length - 1;
      if (pos >= a[hi][0]) return a[hi][1];
      while (hi - lo > 1) { const m = (lo + hi) >> 1; if (a[m][0] <= pos) lo = m; else hi = m; }
      const [p0, x0] = a[lo], [p1, x1] = a[hi];
      return x0 + (x1 - x0) * (pos - p0) / (p1 - p0);
    };
  }

  // Stacked bands as in PyTorch's memory_viz: each allocation sits on the ones allocated before it
  // that are still live; a free lets those above it drop. Returns per allocation its bottom edge
  // as steps [[x, offset], ...] and the stack's top as steps.
  function layout(allocs, toX) {
    const ev = [];
    allocs.forEach((al, i) => { ev.push([al.a, 1, i]); if (al.freed) ev.push([al.f, -1, i]); });
    ev.sort((p, q) => p[0] - q[0] || q[1] - p[1]);
    const live = [];
    const offset = new Float64Array(allocs.length);
    let top = 0;
    const tops = [];
    for (const [pos, kind, i] of ev) {
      const x = toX(pos);
      const al = allocs[i];
      if (kind > 0) {
        al.steps = [[x, top]];
        offset[i] = top;
        live.push(i);
        top += al.b;
      } else {
        const k = live.indexOf(i);
        live.splice(k, 1);
        for (let m = k; m < live.length; m++) {
          const j = live[m];
          offset[j] -= al.b;
          allocs[j].steps.push([x, offset[j]]);
        }
        top -= al.b;
      }
      if (tops.length && tops[tops.length - 1][0] === x) tops[tops.length - 1][1] = top;
      else tops.push([x, top]);
    }
    return tops;
  }

  function stepAt(steps, x) {  // value of a step series at x (the last step at or before x)
    let lo = 0, hi = steps.length - 1;
    if (!steps.length || x < steps[0][0]) return 0;
    while (lo < hi) { const m = (lo + hi + 1) >> 1; if (steps[m][0] <= x) lo = m; else hi = m - 1; }
    return steps[lo][1];
  }

  function buildRun(run) {
    const mt = run.memory_timeline;
    if (!mt || !mt.allocations) return null;
    const S = mt.strings, cats = mt.categories;
    const toX = makeAxis(mt.axis);
    const endX = toX(mt.end_position);
    const all = mt.allocations.map((r, i) => ({
      id: i, a: r[0], freed: r[1] >= 0, f: r[1] >= 0 ? r[1] : mt.end_position, b: r[2], cat: cats[r[3]],
      name: S[r[4]], scope: S[r[5]], shape: S[r[6]], dtype: S[r[7]], frame: S[r[8]], ta: r[9], tf: r[10],
    }));
    all.forEach((al) => { al.x0 = toX(al.a); al.x1 = al.freed ? toX(al.f) : endX; });
    const sum = mt.summarized || {};
    function summarySteps(series) { return (series || []).map(([p, b]) => [toX(p), b]); }
    const actAllocs = all.filter((al) => ACT.has(al.cat)).map((al) => Object.assign({}, al));
    const panels = {
      activation: { allocs: actAllocs, summary: summarySteps(sum.activation) },
      all: { allocs: all.map((al) => Object.assign({}, al)), summary: mergeSteps(summarySteps(sum.activation), summarySteps(sum.other)) },
    };
    for (const p of Object.values(panels)) p.tops = layout(p.allocs, toX);
    const peakX = toX(mt.peak.position);
    return { run, mt, toX, endX, startX: toX(0), panels, peakX, peak: mt.peak, unit: mt.axis.unit, labels: mt.axis.labels };
  }

  function mergeSteps(a, b) {  // sum of two step series
    const xs = Array.from(new Set(a.map((p) => p[0]).concat(b.map((p) => p[0])))).sort((p, q) => p - q);
    return xs.map((x) => [x, stepAt(a, x) + stepAt(b, x)]);
  }

  // ---- drawing ----
  let colourBy = 'category';
  function bandColour(al) { return colourBy === 'scope' ? scopeColour(al.scope) : (CAT_COLOUR[al.cat] || '#999'); }

  function drawPanel(u, model, panelName) {
    const p = model.panels[panelName];
    const ctx = u.ctx;
    const { left, top, width, height } = u.bbox;
    const xmin = u.scales.x.min, xmax = u.scales.x.max;
    ctx.save();
    ctx.beginPath();
    ctx.rect(left, top, width, height);
    ctx.clip();
    const X = (x) => u.valToPos(x, 'x', true), Y = (y) => u.valToPos(y, 'y', true);
    for (const al of p.allocs) {
      if (al.x1 < xmin || al.x0 > xmax) continue;
      ctx.fillStyle = bandColour(al);
      const st = al.steps;
      for (let k = 0; k < st.length; k++) {
        const xa = st[k][0], xb = k + 1 < st.length ? st[k + 1][0] : al.x1;
        if (xb < xmin || xa > xmax) continue;
        const pa = X(xa), pb = X(xb), y0 = Y(st[k][1]), y1 = Y(st[k][1] + al.b);
        ctx.fillRect(pa, y1, Math.max(pb - pa, 0.5), Math.max(y0 - y1, 0.5));
        if (y0 - y1 > 4) { ctx.fillStyle = 'rgba(255,255,255,0.55)'; ctx.fillRect(pa, y1, Math.max(pb - pa, 0.5), 1); ctx.fillStyle = bandColour(al); }
      }
    }
    // Summarized smaller allocations, on top of the listed ones.
    if (p.summary.length) {
      ctx.fillStyle = SUMMARY_COLOUR;
      const xs = Array.from(new Set(p.summary.map((q) => q[0]).concat(p.tops.map((q) => q[0])))).sort((a, b) => a - b);
      for (let k = 0; k < xs.length; k++) {
        const s = stepAt(p.summary, xs[k]);
        if (!s) continue;
        const base = stepAt(p.tops, xs[k]);
        const xb = k + 1 < xs.length ? xs[k + 1] : model.endX;
        const pa = X(xs[k]), pb = X(xb);
        ctx.fillRect(pa, Y(base + s), Math.max(pb - pa, 0.5), Math.max(Y(base) - Y(base + s), 0.5));
      }
    }
    // Outline of the stack's top.
    ctx.strokeStyle = '#1d2330';
    ctx.lineWidth = Math.max(1, devicePixelRatio);
    ctx.beginPath();
    const tops = p.summary.length ? mergeSteps(p.tops, p.summary) : p.tops;
    tops.forEach(([x, v], k) => {
      const px = X(x), py = Y(v);
      if (k === 0) ctx.moveTo(px, py); else { ctx.lineTo(px, Y(tops[k - 1][1])); ctx.lineTo(px, py); }
    });
    ctx.lineTo(X(model.endX), Y(tops.length ? tops[tops.length - 1][1] : 0));
    ctx.stroke();
    // The activation peak.
    const peakBytes = panelName === 'activation' ? model.peak.activation_bytes : model.peak.total_bytes;
    const px = X(model.peakX), py = Y(peakBytes);
    ctx.strokeStyle = '#b3261e';
    ctx.setLineDash([4 * devicePixelRatio, 3 * devicePixelRatio]);
    ctx.beginPath(); ctx.moveTo(px, top); ctx.lineTo(px, top + height); ctx.stroke();
    ctx.setLineDash([]);
    ctx.fillStyle = '#b3261e';
    ctx.beginPath(); ctx.arc(px, py, 4 * devicePixelRatio, 0, 2 * Math.PI); ctx.fill();
    ctx.font = (11 * devicePixelRatio) + 'px system-ui,sans-serif';
    ctx.textAlign = 'left';
    ctx.textBaseline = 'alphabetic';
    const label = (panelName === 'activation' ? 'peak activation ' : 'total at that peak ') + fmtBytes(peakBytes);
    const tw = ctx.measureText(label).width;
    ctx.fillText(label, Math.min(px + 6 * devicePixelRatio, left + width - tw - 4), Math.max(py - 6 * devicePixelRatio, top + 12 * devicePixelRatio));
    ctx.restore();
  }

  // ---- hit testing and the tooltip ----
  function hit(model, panelName, x, y) {
    const p = model.panels[panelName];
    for (const al of p.allocs) {
      if (x < al.x0 || x >= al.x1) continue;
      const off = stepAt(al.steps, x);
      if (y >= off && y < off + al.b) return { al };
    }
    if (p.summary.length) {
      const base = stepAt(p.tops, x), s = stepAt(p.summary, x);
      if (s && y >= base && y < base + s) return { summary: s };
    }
    return null;
  }

  // x ticks on a layer axis: multiples of the increment, plus "set-up" before layer 0 and "end".
  function layerSplits(model, min, max, incr) {
    const out = [];
    const layers = model.labels.filter((l) => l[0] >= 0 && Number.isInteger(l[0]) && l[1] !== 'end').length;
    if (min <= -1 && max >= -1 && max - min <= 24) out.push(-1);  // named only where there is room
    for (let v = Math.max(0, Math.ceil(min / incr) * incr); v <= Math.min(max, layers); v += incr) out.push(v);
    return out;
  }
  function layerTick(model, v) {
    if (v === -1) return 'set-up';
    return Number.isInteger(v) && v >= 0 ? String(v) : '';
  }

  function xLabel(model, x) {
    if (model.unit === 'ms') return x.toFixed(3) + ' ms';
    if (x < 0) return 'set-up';
    const k = Math.floor(x);
    const lab = model.labels.find((l) => l[0] === k);
    return (lab ? lab[1] : (k >= model.labels.length ? 'end' : 'layer ' + k)) + ' +' + (x - k).toFixed(2);
  }

  const tip = document.getElementById('tooltip');
  // Live bytes of a panel at x: the listed bands' stack plus the summarized ones.
  function liveAt(model, panelName, x) {
    const p = model.panels[panelName];
    return stepAt(p.tops, x) + (p.summary.length ? stepAt(p.summary, x) : 0);
  }
  function showTip(model, h, clientX, clientY, at) {
    if (!h && !at) { tip.hidden = true; tip.removeAttribute('data-bytes'); return; }
    let html;
    const head = at ? '<span class="muted">' + esc(xLabel(model, at.x)) + ': ' + esc(fmtBytes(at.live)) + ' live (' +
      esc(at.panel === 'activation' ? 'activation' : 'all memory') + ')</span>' + (h ? '<br>' : '') : '';
    if (at) tip.dataset.live = at.live;
    if (!h) {
      html = head;
      tip.removeAttribute('data-bytes');
      tip.dataset.name = '';
    } else if (h.summary !== undefined) {
      html = '<b>smaller allocations (summarized)</b><br>' + esc(fmtExact(h.summary)) + ' (' + esc(fmtBytes(h.summary)) + ')';
      tip.dataset.bytes = h.summary;
      tip.dataset.name = '';
    } else {
      const al = h.al;
      const life = al.freed
        ? 'allocated ' + xLabel(model, al.x0) + ', freed ' + xLabel(model, al.x1) + ' (' + fmtNs(Math.max(0, al.tf - al.ta)) + ')'
        : 'allocated ' + xLabel(model, al.x0) + ', never freed';
      html = '<b>' + esc(label(al.name, al.frame)) + '</b> <span class="muted">' + esc(al.cat) + '</span><br>' +
        '<span class="tip-bytes">' + esc(fmtExact(al.b)) + '</span> (' + esc(fmtBytes(al.b)) + ')<br>' +
        'shape ' + esc(al.shape || '?') + ' ' + esc(al.dtype) + '<br>scope <code>' + esc(al.scope || '(unscoped)') + '</code><br>' +
        (al.frame ? 'stack <code>' + esc(al.frame) + '</code><br>' : '') + esc(life);
      tip.dataset.bytes = al.b;
      tip.dataset.name = al.name;
    }
    tip.innerHTML = h ? head + html : html;
    tip.hidden = false;
    const r = tip.getBoundingClientRect();
    tip.style.left = Math.min(clientX + 14, window.innerWidth - r.width - 8) + window.scrollX + 'px';
    tip.style.top = clientY + 14 + window.scrollY + 'px';
  }

  // ---- the charts ----
  const charts = [];
  let syncing = false;
  let hovered = null;
  function syncX(src) {
    if (syncing) return;
    syncing = true;
    for (const c of charts) if (c.u !== src) c.u.setScale('x', { min: src.scales.x.min, max: src.scales.x.max });
    syncing = false;
  }

  function makeChart(el, model, panelName, yMax, xRange, width, height) {
    const tops = model.panels[panelName].tops;
    const xs = [xRange[0]].concat(tops.map((t) => t[0]), [xRange[1]]);
    const ys = [0].concat(tops.map((t) => t[1]), [tops.length ? tops[tops.length - 1][1] : 0]);
    for (let k = 1; k < xs.length; k++) if (xs[k] < xs[k - 1]) xs[k] = xs[k - 1];
    const isLayer = model.unit === 'layer';
    const opts = {
      width, height,
      legend: { show: false },
      cursor: { drag: { x: true, y: false, setScale: true }, sync: { key: 'moeprof-x' }, points: { show: false } },
      scales: { x: { time: false, range: (u, min, max) => [min, max] }, y: { range: () => [0, yMax] } },
      axes: [
        {
          label: panelName === 'activation' ? undefined : (isLayer ? 'forward progress (layer)' : 'time (ms)'),
          size: panelName === 'activation' ? 24 : 44, space: 36,
          incrs: isLayer ? [1, 2, 5, 10, 20, 50, 100, 200, 500] : undefined,
          splits: isLayer ? (u, i, min, max, incr) => layerSplits(model, min, max, incr) : undefined,
          values: isLayer ? (u, splits) => splits.map((v) => layerTick(model, v)) : undefined,
        },
        { label: panelName === 'activation' ? 'activation' : 'all memory', size: 96, values: (u, splits) => splits.map(fmtAxisBytes) },
      ],
      series: [{}, { stroke: 'transparent', width: 0, points: { show: false } }],
      hooks: {
        draw: [(u) => drawPanel(u, model, panelName)],
        setScale: [(u, key) => { if (key === 'x') syncX(u); }],
        setCursor: [(u) => {
          if (u !== hovered) return;  // synced charts move their cursor too; the tooltip is the hovered chart's
          const { left, top } = u.cursor;
          if (left == null || left < 0) { showTip(model, null); return; }
          const rect = u.over.getBoundingClientRect();
          const x = u.posToVal(left, 'x');
          const h = hit(model, panelName, x, u.posToVal(top, 'y'));
          showTip(model, h, rect.left + left, rect.top + top, { x, live: liveAt(model, panelName, x), panel: panelName });
        }],
      },
    };
    const u = new uPlot(opts, [xs, ys], el);
    u.over.addEventListener('mouseenter', () => { hovered = u; });
    u.over.addEventListener('mouseleave', () => { if (hovered === u) hovered = null; showTip(model, null); });
    // Wheel: zoom around the cursor; with Shift: pan.
    u.over.addEventListener('wheel', (e) => {
      e.preventDefault();
      const min = u.scales.x.min, max = u.scales.x.max, span = max - min;
      const at = u.posToVal(e.offsetX, 'x');
      let nmin, nmax;
      if (e.shiftKey || Math.abs(e.deltaX) > Math.abs(e.deltaY)) {
        const d = (e.shiftKey ? e.deltaY : e.deltaX) / 500 * span;
        nmin = min + d; nmax = max + d;
      } else {
        const f = e.deltaY > 0 ? 1.25 : 0.8;
        nmin = at - (at - min) * f; nmax = at + (max - at) * f;
      }
      const full = xRange[1] - xRange[0];
      if (nmax - nmin > full) { nmin = xRange[0]; nmax = xRange[1]; }
      if (nmin < xRange[0]) { nmax += xRange[0] - nmin; nmin = xRange[0]; }
      if (nmax > xRange[1]) { nmin -= nmax - xRange[1]; nmax = xRange[1]; }
      u.setScale('x', { min: nmin, max: nmax });
    }, { passive: false });
    charts.push({ u, model, panel: panelName, el });
    return u;
  }

  function renderTimelines() {
    const host = document.getElementById('timeline-charts');
    if (!host) return;
    const models = data.runs.map(buildRun).filter(Boolean);
    // Runs without a per-allocation timeline: streamed (--stream), or reports made without lifetimes.
    const without = data.runs.filter((r) => !r.memory_timeline || !r.memory_timeline.allocations);
    if (without.length) {
      const why = (r) => !r.allocations ? 'no allocation recorded' : r.streamed ? 'analysed as a stream (--stream), which keeps no per-allocation timeline; --stream off draws it'
        : 'analysed without its allocations\' lifetimes';
      host.insertAdjacentHTML('beforebegin', without.map((r) => '<p class="note no-timeline" data-run="' + esc(r.name) + '"><b>' + esc(r.name) +
        '</b>: no timeline: ' + esc(why(r)) + (r.allocations ? '. Peak activation ' + esc(fmtBytes(r.peak_activation_bytes)) + ' (' + esc(fmtExact(r.peak_activation_bytes)) + ')' : '') + '.</p>').join(''));
    }
    if (!models.length) {
      document.querySelectorAll('#timeline .controls, #timeline-legend').forEach((e) => { e.style.display = 'none'; });
      window.__moeprof.models = [];
      return;
    }
    const units = new Set(models.map((m) => m.unit));
    const xRange = [Math.min(...models.map((m) => m.startX)), Math.max(...models.map((m) => m.endX))];
    if (xRange[1] <= xRange[0]) xRange[1] = xRange[0] + 1;
    const actMax = Math.max(1, ...models.map((m) => m.peak.activation_bytes)) * 1.08;
    const allMax = Math.max(1, ...models.map((m) => Math.max(m.peak.total_bytes, ...m.panels.all.tops.map((t) => t[1])))) * 1.05;
    const width = Math.max(480, host.clientWidth - 8);
    if (units.size > 1) host.insertAdjacentHTML('beforebegin', '<p class="warn">These runs have different x axes (layers and time): they are not aligned.</p>');
    for (const m of models) {
      const box = document.createElement('div');
      box.className = 'tl-run';
      box.dataset.run = m.run.name;
      const devs = (m.run.devices || []).length;
      box.innerHTML = '<h3>' + esc(m.run.name) + ' <span class="muted">' + (devs > 1 ? 'device ' + m.mt.device + ' of ' + devs + ' (the highest peak), ' : '') +
        'peak activation ' + esc(fmtBytes(m.peak.activation_bytes)) +
        ' (' + esc(fmtExact(m.peak.activation_bytes)) + ')' + (m.mt.summarized && m.mt.summarized.allocations
          ? ', ' + commas(m.mt.summarized.allocations) + ' smaller allocations summarized' : '') + '</span></h3>' +
        '<div class="chart chart-activation"></div><div class="chart chart-all"></div>';
      host.appendChild(box);
      makeChart(box.querySelector('.chart-activation'), m, 'activation', actMax, xRange, width, 230);
      makeChart(box.querySelector('.chart-all'), m, 'all', allMax, xRange, width, 140);
    }
    document.getElementById('colour-by').addEventListener('change', (e) => { colourBy = e.target.value; charts.forEach((c) => c.u.redraw(false)); renderLegend(); });
    document.getElementById('zoom-reset').addEventListener('click', () => charts[0].u.setScale('x', { min: xRange[0], max: xRange[1] }));
    document.getElementById('zoom-peak').addEventListener('click', () => {
      const x = models[0].peakX;
      charts[0].u.setScale('x', { min: Math.max(xRange[0], x - 1), max: Math.min(xRange[1], x + 1) });
    });
    window.addEventListener('resize', () => {
      const w = Math.max(480, host.clientWidth - 8);
      charts.forEach((c) => c.u.setSize({ width: w, height: c.panel === 'activation' ? 230 : 140 }));
    });
    renderLegend();
    window.__moeprof.models = models;
  }

  function renderLegend() {
    const el = document.getElementById('timeline-legend');
    if (!el) return;
    const items = new Map();
    for (const c of charts) for (const al of c.model.panels.all.allocs) {
      const key = colourBy === 'scope' ? scopeFamily(al.scope) : al.cat;
      if (!items.has(key)) items.set(key, bandColour(al));
    }
    el.innerHTML = Array.from(items).slice(0, 24).map(([k, col]) => '<span class="k" style="background:' + col + '"></span>' + esc(k)).join(' ') +
      ' <span class="k" style="background:' + SUMMARY_COLOUR + '"></span>smaller allocations <span class="k peak"></span>activation peak';
  }

  // ---- icicle of the live set at the peak ----
  function renderIcicles() {
    document.querySelectorAll('.icicle').forEach((el) => {
      const run = data.runs.find((r) => r.name === el.dataset.run);
      if (!run) return;
      // The live set at the peak: from the per-allocation timeline, else (a streamed run) from the
      // largest entries the report lists, the rest as "(smaller allocations)".
      let live, rest;
      if (run.memory_timeline && run.memory_timeline.allocations) {
        const mt = run.memory_timeline, S = mt.strings, p = mt.peak.position;
        live = mt.allocations.filter((r) => r[0] <= p && (r[1] < 0 || p < r[1]) && ACT.has(mt.categories[r[3]]))
          .map((r) => ({ b: r[2], name: label(S[r[4]], S[r[8]]), scope: S[r[5]], frames: S[r[8]] ? S[r[8]].split('\n') : [] }));
        rest = mt.summarized ? mt.summarized.activation_bytes_at_peak : 0;
      } else {
        const lp = run.live_at_peak || {};
        live = (lp.top || []).map((e) => ({ b: e.bytes, name: label(e.name, e.stack), scope: e.scope || '', frames: e.stack || [] }));
        rest = lp.omitted_bytes || 0;
      }
      const hasStacks = live.some((r) => r.frames.length);
      const sel = el.parentElement.querySelector('.icicle-by');
      if (sel && !hasStacks) sel.querySelector('option[value=stack]').disabled = true;
      const draw = () => {
        const byStack = sel && sel.value === 'stack';
        const root = { name: 'live at the peak', value: 0, children: new Map() };
        const add = (path, b) => {
          let n = root; n.value += b;
          for (const part of path) {
            if (!n.children.has(part)) n.children.set(part, { name: part, value: 0, children: new Map() });
            n = n.children.get(part); n.value += b;
          }
        };
        for (const r of live) {
          const path = byStack ? (r.frames.length ? r.frames.slice().reverse() : ['(no stack)']) : (r.scope ? r.scope.split('/') : ['(unscoped)']);
          add(path.concat([r.name]), r.b);
        }
        if (rest) add(['(smaller allocations)'], rest);
        el.innerHTML = icicleSvg(root, el.clientWidth || 900);
        el.dataset.total = root.value;
      };
      if (sel) sel.addEventListener('change', draw);
      draw();
    });
  }

  function icicleSvg(root, W) {
    const H = 22, rows = [];
    const walk = (n, depth, x0, w) => {
      rows.push({ n, depth, x0, w });
      let x = x0;
      const kids = Array.from(n.children.values()).sort((a, b) => b.value - a.value);
      for (const k of kids) { const kw = w * k.value / (n.value || 1); walk(k, depth + 1, x, kw); x += kw; }
    };
    walk(root, 0, 0, W);
    const depth = Math.max(...rows.map((r) => r.depth)) + 1;
    let svg = '<svg class="icicle-svg" viewBox="0 0 ' + W + ' ' + depth * H + '" width="' + W + '" height="' + depth * H + '">';
    for (const r of rows) {
      if (r.w < 0.5) continue;
      const col = r.depth === 0 ? '#5b6475' : scopeColour(r.n.name + r.depth);
      svg += '<g data-bytes="' + r.n.value + '"><rect x="' + r.x0.toFixed(2) + '" y="' + r.depth * H + '" width="' + Math.max(r.w - 1, 0.5).toFixed(2) +
        '" height="' + (H - 1) + '" fill="' + col + '"><title>' + esc(r.n.name) + ': ' + esc(fmtExact(r.n.value)) + ' (' + esc(fmtBytes(r.n.value)) + ')</title></rect>';
      if (r.w > 60) svg += '<text x="' + (r.x0 + 4).toFixed(2) + '" y="' + (r.depth * H + 15) + '">' + esc(clip(r.n.name + ' ' + fmtBytes(r.n.value), r.w / 6.5)) + '</text>';
      svg += '</g>';
    }
    return svg + '</svg>';
  }
  function clip(s, n) { n = Math.floor(n); return s.length <= n ? s : s.slice(0, Math.max(0, n - 1)) + '\u2026'; }

  // ---- serving: the KV pool's occupancy per step (one point per step or range of steps) ----
  function renderOccupancy() {
    document.querySelectorAll('.occupancy-chart').forEach((el) => {
      const run = data.runs.find((r) => r.name === el.dataset.run);
      if (!run || !run.serving || !run.serving.kv_pool_occupancy) return;
      const pts = run.serving.kv_pool_occupancy.points;
      const cap = run.serving.kv_pool_tokens || 1;
      const opts = {
        width: Math.max(480, el.clientWidth || 900), height: 180,
        scales: { x: { time: false }, y: { range: [0, cap] } },
        axes: [{ label: 'step' }, { label: 'tokens in use', size: 80, values: (u, v) => v.map((x) => commas(Math.round(x))) }],
        series: [{ label: 'step' }, { label: 'tokens in use', stroke: '#3b6fd4', fill: 'rgba(59,111,212,0.15)', paths: uPlot.paths.stepped({ align: 1 }) }],
      };
      el.chart = new uPlot(opts, [pts.map((p) => p[0]), pts.map((p) => p[1])], el);
      el.dataset.points = String(pts.length);
    });
  }

  window.__moeprof = { charts, data, fmtBytes, fmtExact, hit };
  try {
    renderOccupancy();
    renderTimelines();
    renderIcicles();
    document.body.dataset.ready = '1';
  } catch (e) {
    document.body.dataset.ready = 'error';
    throw e;
  }
})();
