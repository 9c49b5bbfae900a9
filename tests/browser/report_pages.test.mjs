// moeprof's report pages in a real browser: Debian's chromium (/usr/bin/chromium) driven by
// playwright-core, which never downloads a browser. The pages are generated here by the moeprof
// binary under test; nothing is fetched from the network.
//
// Checks, on every page: no console error and no uncaught exception, no request but the page's own
// file, charts drawn and not blank, a hover over the largest allocation at the peak shows its exact
// bytes, the live-at-peak diff table sums to the change of the peak, the icicle sums to the peak,
// no "undefined", "NaN" or "null" in the page's text; a streamed report (no per-allocation
// timeline) says so per run, hides the timeline's controls and still draws its icicles; a serving
// run's section shows its step kinds' peaks and total as the report has them and draws the KV
// pool's occupancy, one point per step.
// Screenshots go to $MOEPROF_BROWSER_OUT/screenshots; with MOEPROF_DOCS_SCREENSHOTS=DIR the Kimi
// page's timeline and diff are also written there (docs/img).
//
//   MOEPROF_BIN=build/src/cli/moeprof MOEPROF_SOURCE_DIR=. MOEPROF_BROWSER_OUT=build/tests/browser \
//     node --test tests/browser/report_pages.test.mjs
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const BIN = process.env.MOEPROF_BIN;
const SRC = process.env.MOEPROF_SOURCE_DIR;
const OUT = process.env.MOEPROF_BROWSER_OUT || fs.mkdtempSync(path.join(os.tmpdir(), 'moeprof-browser-'));
const CHROMIUM = process.env.MOEPROF_CHROMIUM || '/usr/bin/chromium';
const DOCS = process.env.MOEPROF_DOCS_SCREENSHOTS || '';
const SHOTS = path.join(OUT, 'screenshots');

let chromium;
try {
  ({ chromium } = await import('playwright-core'));
} catch (e) {
  chromium = null;
}
const missing = !chromium ? 'playwright-core is not installed (npm ci in tests/browser)'
  : !fs.existsSync(CHROMIUM) ? CHROMIUM + ' not found (Debian package chromium)' : '';
if (missing) {
  // Without the browser the tests cannot run: CTest reads exit 77 as Skipped, unless the set-up
  // promised a browser (MOEPROF_REQUIRE_BROWSER=1, as scripts/test.sh does), then it is a failure.
  console.error('moeprof browser tests: ' + missing);
  process.exit(process.env.MOEPROF_REQUIRE_BROWSER === '1' ? 1 : 77);
}
assert.ok(BIN && fs.existsSync(BIN), 'MOEPROF_BIN must name the moeprof binary');
assert.ok(SRC, 'MOEPROF_SOURCE_DIR must name the source tree');

function moeprof(...args) { return execFileSync(BIN, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }); }

// The pages under test.
const pages = {};
before(() => {
  fs.rmSync(path.join(OUT, 'pages'), { recursive: true, force: true });
  fs.mkdirSync(path.join(OUT, 'pages'), { recursive: true });
  fs.mkdirSync(SHOTS, { recursive: true });
  const p = (...x) => path.join(OUT, 'pages', ...x);
  // Kimi-K2.5, 16K tokens, TP=4 rank shapes, the three memory modes, allocations only.
  moeprof('run', '--backend', 'meta', '--model', 'kimi-k2.5', '--tokens', '16384', '--tp', '4', '--mode', 'all', '--quiet', '--out', p('kimi'));
  pages.kimi = p('kimi', 'report.html');
  // The tiny model computed on the CPU.
  moeprof('run', '--backend', 'cpu', '--model', 'tiny', '--mode', 'all', '--quiet', '--out', p('tiny'));
  pages.tiny = p('tiny', 'report.html');
  // The hand-countable golden traces: -339 B.
  const g = path.join(SRC, 'tests', 'golden');
  moeprof('report', path.join(g, 'baseline.mtrace'), path.join(g, 'reuse.mtrace'), '--out-html', p('golden.html'));
  pages.golden = p('golden.html');
  // The same with only the 3 largest allocations listed: the rest summarized, exact at the peak.
  moeprof('report', path.join(g, 'baseline.mtrace'), path.join(g, 'reuse.mtrace'), '--max-allocations', '3', '--out-html', p('summarized.html'));
  pages.summarized = p('summarized.html');
  // A PyTorch snapshot: no layer scopes, so the x axis is time; one run, no comparison.
  moeprof('import', path.join(g, 'torch', 'random.pickle'), '--out', p('torch.mtrace'));
  moeprof('report', p('torch.mtrace'), '--out-html', p('torch.html'));
  pages.torch = p('torch.html');
  // The golden traces analysed as a stream: no per-allocation timeline; the page
  // says so, and its icicles come from the live entries the report lists.
  moeprof('report', path.join(g, 'baseline.mtrace'), path.join(g, 'reuse.mtrace'), '--stream', 'on', '--top', '3', '--out-html', p('streamed.html'));
  pages.streamed = p('streamed.html');
  // A serving run of the tiny model on the CPU: chunked prefill, decode batches (some replayed from
  // CUDA graphs), a pool smaller than the workload, two memory modes.
  moeprof('run', '--backend', 'cpu', '--model', 'tiny', '--workload', 'synthetic:12,4-40,2-9,3', '--chunked-prefill-size', '32',
    '--kv-tokens', '96', '--page-size', '4', '--max-running-requests', '4', '--cuda-graph-bs', '1,2', '--mode', 'both', '--quiet', '--out', p('serving'));
  pages.serving = p('serving', 'report.html');
});

let context, profile;
before(async () => {
  // A new, empty profile; the flags keep Chromium from any network traffic of its own.
  profile = fs.mkdtempSync(path.join(os.tmpdir(), 'moeprof-chromium-'));
  context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1280, height: 900 },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  });
});
after(async () => {
  if (context) await context.close();
  if (profile) fs.rmSync(profile, { recursive: true, force: true });
});

// Opens a page; returns it with the console errors, uncaught exceptions and requests it made.
async function open(file) {
  const page = await context.newPage();
  const seen = { errors: [], requests: [] };
  page.on('console', (m) => { if (m.type() === 'error') seen.errors.push(m.text()); });
  page.on('pageerror', (e) => seen.errors.push(String(e)));
  page.on('request', (r) => seen.requests.push(r.url()));
  const url = pathToFileURL(file).href;
  await page.goto(url);
  await page.waitForFunction(() => document.body.dataset.ready, null, { timeout: 20000 });
  assert.equal(await page.evaluate(() => document.body.dataset.ready), '1', 'page script finished');
  seen.url = url;
  return { page, seen };
}

function reportOf(file) {  // the report JSON the page embeds, read here without the page's script
  const html = fs.readFileSync(file, 'utf8');
  const m = html.match(/<script type="application\/json" id="moeprof-data">([\s\S]*?)<\/script>/);
  return JSON.parse(m[1].replace(/<\\\//g, '</').replace(/\\u003c!/g, '<!'));
}

// Position -> x as the report defines it (piecewise linear between the axis anchors).
function toX(anchors, pos) {
  if (pos <= anchors[0][0]) return anchors[0][1];
  for (let i = 1; i < anchors.length; i++) {
    const [p0, x0] = anchors[i - 1], [p1, x1] = anchors[i];
    if (pos <= p1) return x0 + (x1 - x0) * (pos - p0) / (p1 - p0);
  }
  return anchors[anchors.length - 1][1];
}

async function checkClean(page, seen) {
  assert.deepEqual(seen.errors, [], 'no console error');
  assert.deepEqual(seen.requests.filter((u) => u !== seen.url), [], 'no request but the page itself');
  // No value the script or the renderer failed to fill in.
  const text = await page.evaluate(() => document.body.innerText);
  for (const junk of [/\bundefined\b/, /\bNaN\b/, /\bnull\b/, /\[object /]) assert.doesNotMatch(text, junk, 'the page text has no ' + junk);
}

// A report whose runs have no per-allocation timeline (streamed): each run says why, the
// timeline's controls are hidden, no chart is drawn.
async function checkWithoutTimeline(page, doc) {
  const runs = doc.runs.filter((r) => !r.memory_timeline);
  const notes = await page.evaluate(() => Array.from(document.querySelectorAll('#timeline .no-timeline')).map((e) => ({ run: e.dataset.run, text: e.textContent })));
  assert.equal(notes.length, runs.length, 'one note per run without a timeline');
  for (const r of runs) {
    const n = notes.find((x) => x.run === r.name);
    assert.ok(n, r.name + ': has a note');
    if (r.streamed) assert.match(n.text, /stream/, r.name + ': the note says the run was streamed');
    assert.ok(n.text.includes(r.peak_activation_bytes.toLocaleString('en-US') + ' B'), r.name + ': the note gives the exact peak');
  }
  if (runs.length === doc.runs.length) {
    assert.equal(await page.locator('#timeline .controls').isVisible(), false, 'no zoom or colour controls without a chart');
    assert.equal(await page.locator('#timeline canvas').count(), 0, 'no chart');
  }
  const streamedNotes = await page.locator('#runs .note.streamed').count();
  assert.equal(streamedNotes, doc.runs.filter((r) => r.streamed).length, 'the runs section names every streamed run');
}

async function checkChartsDrawn(page, doc) {
  const withTimeline = doc.runs.filter((r) => r.memory_timeline);
  const stats = await page.evaluate(() => Array.from(document.querySelectorAll('.tl-run canvas')).map((c) => {
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let inked = 0;
    for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 0 && (d[i] < 235 || d[i + 1] < 235 || d[i + 2] < 235)) inked++;
    return { w: c.width, h: c.height, inked };
  }));
  assert.equal(stats.length, 2 * withTimeline.length, 'two charts per run (activation, all memory)');
  for (const s of stats) {
    assert.ok(s.w > 300 && s.h > 100, 'chart has a size');
    assert.ok(s.inked > 0.02 * s.w * s.h, 'chart is not blank (' + s.inked + ' inked pixels)');
  }
}

// Hovers the largest activation allocation live at each run's peak; the tooltip must show it.
async function checkHover(page, doc) {
  const runs = doc.runs.filter((r) => r.memory_timeline);
  for (let ri = 0; ri < runs.length; ri++) {
    const mt = runs[ri].memory_timeline, p = mt.peak.position;
    const act = new Set(['activation', 'workspace', 'communication', 'unknown']);
    const live = mt.allocations.map((r, i) => ({ i, a: r[0], f: r[1] < 0 ? Infinity : r[1], b: r[2], cat: mt.categories[r[3]], name: mt.strings[r[4]] }))
      .filter((al) => al.a <= p && p < al.f && act.has(al.cat));
    const liveSum = live.reduce((s, al) => s + al.b, 0) + mt.summarized.activation_bytes_at_peak;
    assert.equal(liveSum, mt.peak.activation_bytes, runs[ri].name + ': the allocations live at the peak sum to it');
    assert.equal(mt.peak.activation_bytes, runs[ri].peak_activation_bytes);
    const target = live.reduce((m, al) => (al.b > m.b ? al : m));
    let offset = 0;
    for (const al of live) if (al.a < target.a) offset += al.b;  // stacked in allocation order
    // Just right of the peak's position (the value holds until the next event).
    const next = Math.min(...mt.allocations.flatMap((r) => [r[0], r[1]]).filter((q) => q > p), mt.end_position);
    const x = (toX(mt.axis.anchors, p) + toX(mt.axis.anchors, next)) / 2;
    const y = offset + target.b / 2;
    // Zoomed to the peak (all charts follow), so that a band a few pixels wide at full scale is wide.
    const span = Math.max(0.05, 4 * (toX(mt.axis.anchors, next) - toX(mt.axis.anchors, p)));
    await page.evaluate(([ri, x, span]) => {
      const c = window.__moeprof.charts.filter((k) => k.panel === 'activation')[ri];
      c.u.setScale('x', { min: x - span, max: x + span });
      c.el.scrollIntoView({ block: 'center' });
    }, [ri, x, span]);
    // uPlot applies a new scale in a microtask: read the positions after it.
    const pt = await page.evaluate(([ri, x, y]) => {
      const c = window.__moeprof.charts.filter((k) => k.panel === 'activation')[ri];
      const r = c.u.over.getBoundingClientRect();
      return { x: r.left + c.u.valToPos(x, 'x'), y: r.top + c.u.valToPos(y, 'y') };
    }, [ri, x, y]);
    await page.mouse.move(pt.x, pt.y);
    await page.waitForFunction(() => !document.getElementById('tooltip').hidden, null, { timeout: 5000 });
    const tip = await page.evaluate(() => { const t = document.getElementById('tooltip'); return { bytes: t.dataset.bytes, name: t.dataset.name, text: t.textContent }; });
    assert.equal(Number(tip.bytes), target.b, runs[ri].name + ': hover shows the bytes of ' + target.name);
    assert.equal(tip.name, target.name);
    assert.ok(tip.text.includes(target.b.toLocaleString('en-US') + ' B'), 'tooltip text has the exact bytes: ' + tip.text);
    await page.mouse.move(0, 0);
  }
  if (runs.length) await page.click('#zoom-reset');
}

async function checkDiff(page, doc) {
  const comps = doc.comparisons || (doc.comparison ? [doc.comparison] : []);
  const got = await page.evaluate(() => Array.from(document.querySelectorAll('section.comparison')).map((s) => ({
    rows: Array.from(s.querySelectorAll('tr.diff-row td.diff-delta span')).map((e) => Number(e.dataset.bytes)),
    sum: Number(s.querySelector('tr.sum td:last-child span').dataset.bytes),
    peak: Number(s.querySelector('table.metrics tr td:nth-child(4) span').dataset.bytes),
  })));
  assert.equal(got.length, comps.length, 'one comparison section per comparison');
  for (let i = 0; i < comps.length; i++) {
    const rowsSum = got[i].rows.reduce((s, v) => s + v, 0);
    assert.equal(got[i].peak, comps[i].peak_activation_delta_bytes, 'the metrics table shows the change of the peak');
    assert.equal(rowsSum, comps[i].peak_activation_delta_bytes, 'the diff rows sum to the change of the peak');
    assert.equal(got[i].sum, comps[i].peak_activation_delta_bytes, 'the sum row is the change of the peak');
  }
}

async function checkIcicles(page, doc) {
  const totals = await page.evaluate(() => Array.from(document.querySelectorAll('.icicle')).map((e) => ({ run: e.dataset.run, total: Number(e.dataset.total), rects: e.querySelectorAll('rect').length })));
  for (const t of totals) {
    const run = doc.runs.find((r) => r.name === t.run);
    // Without a timeline the icicle is built from the listed live entries and the omitted rest.
    const peak = run.memory_timeline ? run.memory_timeline.peak.activation_bytes : run.live_at_peak.activation_bytes;
    assert.equal(t.total, peak, t.run + ': the icicle sums to the peak');
    assert.equal(t.total, run.peak_activation_bytes);
    assert.ok(t.rects > 2, 'the icicle has rectangles');
  }
}

async function checkZoom(page) {
  const before = await page.evaluate(() => window.__moeprof.charts.map((c) => [c.u.scales.x.min, c.u.scales.x.max]));
  const box = await page.evaluate(() => { const c = window.__moeprof.charts[0]; c.el.scrollIntoView({ block: 'center' }); const r = c.u.over.getBoundingClientRect(); return { x: r.left + r.width / 2, y: r.top + r.height / 2 }; });
  await page.mouse.move(box.x, box.y);
  await page.mouse.wheel(0, -300);
  await page.waitForFunction((w) => window.__moeprof.charts[0].u.scales.x.max - window.__moeprof.charts[0].u.scales.x.min < w, before[0][1] - before[0][0]);
  const afterZoom = await page.evaluate(() => window.__moeprof.charts.map((c) => [c.u.scales.x.min, c.u.scales.x.max]));
  assert.ok(afterZoom[0][1] - afterZoom[0][0] < before[0][1] - before[0][0], 'the wheel zooms in');
  for (const r of afterZoom) assert.deepEqual(r, afterZoom[0], 'every chart shares the zoomed x range');
  await page.click('#zoom-reset');
}

// A serving run's section: the step kinds' peaks and the total as the report has them, and the
// KV pool's occupancy chart drawn with one point per step.
async function checkServing(page, doc) {
  const runs = doc.runs.filter((r) => r.serving);
  assert.ok(runs.length > 0, 'the serving page has serving runs');
  for (const run of runs) {
    const got = await page.evaluate((name) => {
      const sec = document.querySelector('.serving[data-run="' + name + '"]');
      const kinds = {};
      sec.querySelectorAll('tr.step-kind').forEach((tr) => { kinds[tr.dataset.kind] = Number(tr.querySelector('td:nth-child(4) span').dataset.bytes); });
      const chart = sec.querySelector('.occupancy-chart');
      const c = chart.querySelector('canvas');
      const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
      let inked = 0;
      for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 0 && (d[i] < 235 || d[i + 1] < 235 || d[i + 2] < 235)) inked++;
      return { kinds, total: Number(sec.querySelector('.serving-total span').dataset.bytes), points: Number(chart.dataset.points), inked, w: c.width, h: c.height };
    }, run.name);
    for (const k of ['prefill', 'decode']) assert.equal(got.kinds[k], run.serving.step_kinds[k].peak_activation_bytes, run.name + ': the ' + k + ' peak');
    assert.equal(got.total, run.serving.memory.total_bytes, run.name + ': the total');
    assert.equal(got.points, run.serving.kv_pool_occupancy.points.length, run.name + ': one point per step');
    assert.ok(run.serving.kv_pool_occupancy.points.length > 5, 'the run has steps');
    assert.ok(got.inked > 0.01 * got.w * got.h, run.name + ': the occupancy chart is not blank (' + got.inked + ' inked pixels)');
  }
  assert.equal(await page.locator('nav a[href="#serving"]').count(), 1, 'the page links its serving section');
}

async function shoot(page, name, selector) {
  const file = path.join(SHOTS, name + '.png');
  if (selector) await page.locator(selector).first().screenshot({ path: file });
  else await page.screenshot({ path: file, fullPage: true });
  return file;
}

for (const name of ['kimi', 'tiny', 'golden', 'summarized', 'torch', 'streamed', 'serving']) {
  test(name + ' report page', async () => {
    const file = pages[name];
    const doc = reportOf(file);
    const { page, seen } = await open(file);
    await checkChartsDrawn(page, doc);
    await checkHover(page, doc);
    await checkDiff(page, doc);
    await checkIcicles(page, doc);
    await checkWithoutTimeline(page, doc);
    if (name === 'streamed') assert.ok(doc.runs.every((r) => r.streamed && !r.memory_timeline), 'the streamed report has no timeline');
    if (name === 'serving') {
      await checkServing(page, doc);
      await shoot(page, 'serving-section', '#serving');
    } else {
      assert.equal(await page.locator('#serving').count(), 0, 'no serving section without a serving run');
    }
    if (name === 'kimi') await checkZoom(page);
    if (name === 'kimi' || name === 'tiny') {
      const fixes = await page.locator('#fixes table.fixes tbody tr').count();
      assert.ok(fixes > 0, 'the baseline\'s ranked fixes are on the page');
    }
    await checkClean(page, seen);
    await shoot(page, name + '-page');
    await shoot(page, name + '-timeline', '#timeline');
    if (doc.comparison) await shoot(page, name + '-diff', 'section.comparison');
    if (name === 'kimi' && DOCS) {
      fs.mkdirSync(DOCS, { recursive: true });
      await page.setViewportSize({ width: 1280, height: 900 });
      await page.locator('#timeline').screenshot({ path: path.join(DOCS, 'kimi-timeline.png') });
      await page.locator('section.comparison').first().screenshot({ path: path.join(DOCS, 'kimi-diff.png') });
      // Zoomed to the baseline's peak (layer 1, the first MoE layer), hovering its largest tensor.
      const doc0 = doc.runs[0].memory_timeline;
      const px = await page.evaluate(() => window.__moeprof.models[0].peakX);
      await page.evaluate((x) => window.__moeprof.charts[0].u.setScale('x', { min: x - 1.2, max: x + 0.8 }), px);
      const pt = await page.evaluate(([x, y]) => {
        const c = window.__moeprof.charts[0];
        c.el.scrollIntoView({ block: 'center' });
        const r = c.u.over.getBoundingClientRect();
        return { x: r.left + c.u.valToPos(x, 'x'), y: r.top + c.u.valToPos(y, 'y') };
      }, [px + 0.05, doc0.peak.activation_bytes * 0.6]);
      await page.mouse.move(pt.x, pt.y);
      await page.waitForFunction(() => !document.getElementById('tooltip').hidden);
      const box = await page.locator('.tl-run').first().boundingBox();
      await page.screenshot({ path: path.join(DOCS, 'kimi-peak-hover.png'), clip: { x: box.x, y: box.y, width: box.width, height: box.height + 60 } });
      await page.mouse.move(0, 0);
    }
    await page.close();
  });
}
