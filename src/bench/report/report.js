// Draws the benchmark report from REPORT_DATA (written by `deltaserve report`). Each chart marks
// its canvas with data-drawn="1" once Chart.js has rendered it, and page errors are collected in
// #page-errors, so a headless browser can check the page worked from the DOM alone.
(function () {
  'use strict';
  const errorBox = document.getElementById('page-errors');
  function pageError(msg) {
    errorBox.hidden = false;
    errorBox.textContent += msg + '\n';
    document.body.dataset.errors = String((Number(document.body.dataset.errors) || 0) + 1);
  }
  window.addEventListener('error', (e) => pageError('error: ' + e.message));

  let drawn = 0;
  Chart.register({
    id: 'drawnMarker',
    afterRender(chart) {
      if (chart.canvas.dataset.drawn !== '1') {
        chart.canvas.dataset.drawn = '1';
        drawn += 1;
        document.body.dataset.chartsDrawn = String(drawn);
      }
    },
  });
  Chart.defaults.animation = false;
  Chart.defaults.maintainAspectRatio = false;
  Chart.defaults.font.family = 'system-ui, sans-serif';

  const palette = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#17becf', '#8c564b', '#e377c2'];
  const runs = REPORT_DATA.runs;
  const labels = [...new Set(runs.map((r) => r.label))];
  const color = (label) => palette[labels.indexOf(label) % palette.length];
  const fmt = (v, d) => (v === null || v === undefined || Number.isNaN(v) ? 'n/a' : Number(v).toFixed(d));
  const pct = (v) => (v === null || v === undefined ? 'n/a' : (100 * v).toFixed(1) + '%');
  const byLabel = (label) => runs.filter((r) => r.label === label).sort((a, b) => a.concurrency - b.concurrency);

  document.getElementById('run-count').textContent =
    runs.length + ' result' + (runs.length === 1 ? '' : 's') + ' (' + labels.length + ' run' + (labels.length === 1 ? '' : 's') + ')';

  function summaryTable() {
    const cols = [
      ['run', (r) => r.label, 'text'], ['conc', (r) => r.concurrency],
      ['valid', (r) => (r.valid ? 'yes' : 'NO: ' + r.reasons.join('; ')), 'text'],
      ['completed', (r) => r.completed], ['failed', (r) => r.failed],
      ['req/s', (r) => fmt(r.request_rate, 2)], ['out tok/s', (r) => fmt(r.output_tok_s, 1)],
      ['out tok/s/rank', (r) => fmt(r.output_tok_s_per_rank, 1)], ['total tok/s', (r) => fmt(r.total_tok_s, 1)],
      ['TTFT p50 ms', (r) => fmt(1e3 * r.ttft.p50, 0)], ['TTFT p90 ms', (r) => fmt(1e3 * r.ttft.p90, 0)],
      ['ITL p50 ms', (r) => fmt(1e3 * r.itl.p50, 1)], ['ITL p90 ms', (r) => fmt(1e3 * r.itl.p90, 1)],
      ['TPOT p50 ms', (r) => fmt(1e3 * r.tpot.p50, 1)], ['E2E p90 s', (r) => fmt(r.e2e.p90, 2)],
      ['interactivity p90', (r) => fmt(r.interactivity.p90, 1)],
      ['theoretical hit', (r) => pct(r.cache.theoretical)], ['served hit (usage)', (r) => pct(r.cache.usage)],
      ['served hit (/metrics)', (r) => pct(r.cache.metrics)], ['spec AL', (r) => fmt(r.acceptance_length, 2)],
      ['synthetic AL', (r) => (r.synthetic_acceptance ? 'yes' : 'no'), 'text'],
    ];
    const t = document.getElementById('summary');
    const head = t.createTHead().insertRow();
    for (const [name, , cls] of cols) {
      const th = document.createElement('th');
      th.textContent = name;
      if (cls) th.className = cls;
      head.appendChild(th);
    }
    const body = t.createTBody();
    for (const r of runs) {
      const tr = body.insertRow();
      for (const [name, get, cls] of cols) {
        const td = tr.insertCell();
        td.textContent = String(get(r));
        if (cls) td.className = cls;
        if (name === 'valid') td.classList.add(r.valid ? 'valid' : 'invalid');
      }
    }
  }

  // Points no other point of the same run beats on both throughput and interactivity.
  function frontier(points) {
    const sorted = [...points].sort((a, b) => b.x - a.x || b.y - a.y);
    const out = [];
    let best = -Infinity;
    for (const p of sorted) {
      if (p.y > best) {
        out.push(p);
        best = p.y;
      }
    }
    return out.sort((a, b) => a.x - b.x);
  }

  function paretoChart() {
    const datasets = [];
    for (const label of labels) {
      const pts = byLabel(label).map((r) => ({ x: r.interactivity.p90, y: r.output_tok_s_per_rank, c: r.concurrency, valid: r.valid }));
      datasets.push({
        type: 'scatter', label: label, data: pts, backgroundColor: color(label), borderColor: color(label),
        pointRadius: 5, pointStyle: pts.map((p) => (p.valid ? 'circle' : 'crossRot')),
      });
      datasets.push({
        type: 'line', label: label + ' frontier', data: frontier(pts), borderColor: color(label),
        borderDash: [4, 3], pointRadius: 0, fill: false,
      });
    }
    new Chart(document.getElementById('chart-pareto'), {
      type: 'scatter',
      data: { datasets },
      options: {
        scales: {
          x: { type: 'linear', title: { display: true, text: 'p90 interactivity (tokens/s per user)' } },
          y: { type: 'linear', title: { display: true, text: 'output tokens/s per rank' }, beginAtZero: true },
        },
        plugins: {
          tooltip: { callbacks: { label: (ctx) => `${ctx.dataset.label}: conc ${ctx.raw.c}, ${fmt(ctx.raw.x, 1)} tok/s/user, ${fmt(ctx.raw.y, 1)} tok/s/rank` } },
        },
      },
    });
  }

  function percentileChart(id, key, title) {
    const datasets = [];
    const styles = { p50: [], p90: [6, 3], p99: [2, 2] };
    for (const label of labels) {
      for (const p of ['p50', 'p90', 'p99']) {
        datasets.push({
          label: `${label} ${p}`, borderColor: color(label), backgroundColor: color(label), borderDash: styles[p],
          data: byLabel(label).map((r) => ({ x: r.concurrency, y: 1e3 * r[key][p] })), pointRadius: 3,
        });
      }
    }
    new Chart(document.getElementById(id), {
      type: 'line',
      data: { datasets },
      options: {
        scales: {
          x: { type: 'linear', title: { display: true, text: 'concurrency (lanes)' }, ticks: { precision: 0 } },
          y: { type: 'linear', title: { display: true, text: title + ' (ms)' }, beginAtZero: true },
        },
      },
    });
  }

  function cacheChart() {
    const cats = runs.map((r) => (labels.length > 1 ? r.label + ' ' : '') + 'c=' + r.concurrency);
    const series = [['theoretical', (r) => r.cache.theoretical, '#7f8ea3'],
      ['served (usage)', (r) => r.cache.usage, '#1f77b4'], ['served (/metrics)', (r) => r.cache.metrics, '#2ca02c']];
    new Chart(document.getElementById('chart-cache'), {
      type: 'bar',
      data: {
        labels: cats,
        datasets: series.map(([name, get, c]) => ({
          label: name, backgroundColor: c, data: runs.map((r) => (get(r) === null ? null : 100 * get(r))),
        })),
      },
      options: { scales: { y: { beginAtZero: true, max: 100, title: { display: true, text: 'hit rate (% of prompt tokens)' } } } },
    });
  }

  function timelines() {
    const host = document.getElementById('timelines');
    for (const r of runs) {
      const fig = document.createElement('figure');
      const h = document.createElement('h2');
      h.textContent = `${r.label}, concurrency ${r.concurrency}` + (r.timeline_truncated ? ` (first ${r.timeline.length} requests)` : '');
      const div = document.createElement('div');
      div.className = 'timeline';
      const canvas = document.createElement('canvas');
      canvas.className = 'timeline-canvas';
      div.appendChild(canvas);
      fig.appendChild(h);
      fig.appendChild(div);
      host.appendChild(fig);
      // [lane, depth, send, first_token, end, warmup, failed]
      const row = (q) => 'lane ' + q[0] + (q[1] > 0 ? ' sub' : '');
      const rows = [...new Set(r.timeline.map(row))].sort((a, b) => a.localeCompare(b, undefined, { numeric: true }));
      const wait = [], decode = [], waitColors = [], decodeColors = [];
      for (const q of r.timeline) {
        const first = q[3] === null ? q[4] : q[3];
        const base = q[6] ? '#d92d20' : q[5] ? '#98a2b3' : color(r.label);
        wait.push({ x: [q[2], first], y: row(q) });
        waitColors.push(base + '55');
        decode.push({ x: [first, q[4]], y: row(q) });
        decodeColors.push(base);
      }
      new Chart(canvas, {
        type: 'bar',
        data: {
          labels: rows,
          datasets: [
            { label: 'waiting for first token', data: wait, backgroundColor: waitColors, grouped: false, barPercentage: 0.8, categoryPercentage: 1 },
            { label: 'decoding', data: decode, backgroundColor: decodeColors, grouped: false, barPercentage: 0.8, categoryPercentage: 1 },
          ],
        },
        options: {
          indexAxis: 'y',
          scales: { x: { type: 'linear', title: { display: true, text: 'seconds since the point started' } } },
          plugins: { legend: { display: false } },
        },
      });
    }
  }

  for (const [name, draw] of [['summary', summaryTable], ['pareto', paretoChart], ['ttft', () => percentileChart('chart-ttft', 'ttft', 'TTFT')],
    ['itl', () => percentileChart('chart-itl', 'itl', 'ITL')], ['cache', cacheChart], ['timelines', timelines]]) {
    try {
      draw();
    } catch (e) {
      pageError(name + ': ' + (e && e.stack ? e.stack : e));
    }
  }
  document.body.dataset.chartsExpected = String(4 + runs.length);
})();
