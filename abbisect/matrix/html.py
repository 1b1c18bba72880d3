"""The matrix as one static HTML page: no server, no network (inline CSS and JS), every value escaped.

Sortable columns; filters by GPU class, engine, model and outcome through the page's own controls, whose
state lives in the URL fragment (`matrix.html#outcome=bad&engine=vllm`), so a filtered view is a link.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from html import escape
from urllib.parse import quote

from abbisect.matrix.cells import Cell, Matrix

FILTERS = (("gpu", "GPU class"), ("engine", "engine"), ("model", "model"), ("outcome", "outcome"))
COLUMNS = (
    "model",
    "engine",
    "version",
    "commit",
    "GPU stack",
    "status",
    "outcome",
    "date",
    "evidence",
    "report",
)

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1b1f23}
h1{font-size:1.4em;margin:0 0 .3em}
.controls{display:flex;flex-wrap:wrap;gap:.8em;align-items:center;margin:.8em 0;padding:.6em;
background:#f6f8fa;border:1px solid #d0d7de;border-radius:6px}
table{border-collapse:collapse;width:100%}
th,td{border:1px solid #d0d7de;padding:.3em .5em;text-align:left;vertical-align:top}
th{background:#f6f8fa;cursor:pointer;user-select:none;white-space:nowrap}
th[aria-sort=ascending]::after{content:" ▲"} th[aria-sort=descending]::after{content:" ▼"}
tr.transition td{background:#fff8c5}
tr.transition td.outcome{font-weight:bold}
tr.env td:first-child{box-shadow:inset 4px 0 #0969da}
.o-good{color:#1a7f37}.o-bad{color:#cf222e}.o-skip{color:#6e7781}
span.conflict{color:#9a6700}
tr.conflict td.evidence{box-shadow:inset -4px 0 #bf8700}
code{font-size:.9em}
.key{color:#6e7781;font-size:.85em}
figure{display:inline-block;margin:1em 1em 0 0;vertical-align:top}
figcaption{font-size:.9em;color:#57606a}
"""

JS = """
(function () {
  var rows = Array.prototype.slice.call(document.querySelectorAll('#cells tbody tr'));
  var names = ['gpu', 'engine', 'model', 'outcome'];
  var controls = {};
  names.forEach(function (n) { controls[n] = document.getElementById('f-' + n); });
  var only = {transition: document.getElementById('f-transition'), env: document.getElementById('f-env')};
  function apply() {
    var shown = 0;
    rows.forEach(function (r) {
      var ok = names.every(function (n) { return !controls[n].value || r.dataset[n] === controls[n].value; });
      Object.keys(only).forEach(function (k) {
        if (only[k] && only[k].checked && !r.classList.contains(k)) ok = false;
      });
      r.hidden = !ok;
      if (ok) shown++;
    });
    document.getElementById('shown').textContent = shown;
    var state = [];
    names.forEach(function (n) {
      if (controls[n].value) state.push(n + '=' + encodeURIComponent(controls[n].value));
    });
    Object.keys(only).forEach(function (k) { if (only[k] && only[k].checked) state.push(k + '=1'); });
    try { history.replaceState(null, '', '#' + state.join('&')); } catch (e) { /* some file: URLs refuse */ }
  }
  names.forEach(function (n) { controls[n].addEventListener('change', apply); });
  Object.keys(only).forEach(function (k) { if (only[k]) only[k].addEventListener('change', apply); });
  // The fragment sets the controls, as if a person had chosen them.
  var sortBy = null;
  location.hash.replace(/^#/, '').split('&').forEach(function (kv) {
    if (!kv) return;
    var i = kv.indexOf('='), k = kv.slice(0, i), v = decodeURIComponent(kv.slice(i + 1));
    if (k === 'sort') { sortBy = v; return; }
    var el = controls[k] || only[k];
    if (!el) return;
    if (el.type === 'checkbox') { el.checked = v === '1'; }
    else if (Array.prototype.some.call(el.options, function (o) { return o.value === v; })) { el.value = v; }
    else return;
    el.dispatchEvent(new Event('change'));
  });
  var body = document.querySelector('#cells tbody');
  document.querySelectorAll('#cells th').forEach(function (th, col) {
    th.addEventListener('click', function () {
      var dir = th.getAttribute('aria-sort') === 'ascending' ? -1 : 1;
      document.querySelectorAll('#cells th').forEach(function (h) { h.removeAttribute('aria-sort'); });
      th.setAttribute('aria-sort', dir === 1 ? 'ascending' : 'descending');
      rows.sort(function (a, b) {
        var x = a.cells[col].dataset.sort || a.cells[col].textContent;
        var y = b.cells[col].dataset.sort || b.cells[col].textContent;
        return x < y ? -dir : x > y ? dir : 0;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
  if (sortBy) {  // sort=date, or sort=-date for descending: as if the header were clicked (twice)
    document.querySelectorAll('#cells th').forEach(function (th) {
      if (th.textContent === sortBy.replace(/^-/, '')) { th.click(); if (sortBy[0] === '-') th.click(); }
    });
  }
  apply();
})();
"""


def _e(value: object) -> str:
    return escape(str(value if value is not None else ""), quote=True)


def _select(name: str, label: str, values: list[str]) -> str:
    options = "".join(f'<option value="{_e(v)}">{_e(v)}</option>' for v in values)
    select = f'<select id="f-{name}" name="{name}"><option value="">all</option>{options}</select>'
    return f"<label>{_e(label)} {select}</label>"


def _attrs(c: Cell) -> dict[str, str]:
    return {"gpu": c.stack.gpu_class, "engine": c.engine, "model": c.model, "outcome": c.outcome}


def _row(c: Cell) -> str:
    classes = " ".join(
        k
        for k, on in (
            ("cell", True),
            ("transition", bool(c.transition)),
            ("conflict", bool(c.conflicts)),
            ("env", c.env_match),
        )
        if on
    )
    data = " ".join(f'data-{k}="{_e(v)}"' for k, v in _attrs(c).items())
    outcome = f'<span class="o-{_e(c.outcome)}">{_e(c.outcome)}</span>'
    if c.transition:
        outcome += (
            f'<br><span class="move">{_e(c.transition)} since <code>{_e(c.transition_from[:10])}</code>'
            f"{' (its parent)' if c.adjacent else ''}</span>"
        )
    evidence = _e(c.trials())
    for x in c.conflicts:
        evidence += (
            f'<br><span class="conflict">⚠ also {_e(x.outcome)} ({_e(x.status)}, {_e(x.recipe)}, '
            f"{_e(x.date[:10])}, "
            f'<a href="{_e(quote(x.report))}">{_e(x.source)}</a>)</span>'
        )
    commit = f'<code title="{_e(c.subject)}">{_e(c.commit[:10])}</code>' + (
        f" {_e(c.ref)}" if c.ref and c.ref != c.commit else ""
    )
    if c.dependency:
        commit += f'<br><span class="key">+ {_e(c.dependency)}</span>'
    repo = f'<br><span class="key">{_e(c.engine_repo)}</span>' if c.engine_repo else ""
    model = _e(c.model) + (f'<br><span class="key">{_e(c.model_id)}</span>' if c.model_id != c.model else "")
    cells = [
        (c.model, model),
        (c.engine, _e(c.engine) + repo),
        (c.engine_version, _e(c.engine_version) or "—"),
        (f"{c.evidence.commit_date or ''} {c.commit}", commit),
        (
            c.stack.gpu_class,
            (
                f'{_e(c.stack.gpu_class)}<br><span class="key" title="{_e(c.stack.summary)}">'
                f"{_e(c.stack.key or '?')} · {_e(c.stack.summary)}</span>"
            ),
        ),
        (c.status, _e(c.status)),
        (c.outcome, outcome),
        (c.date, _e(c.date[:16].replace("T", " "))),
        (str(c.n_evidence).rjust(6), evidence),
        (
            c.report,
            f'<a class="report" href="{_e(quote(c.report))}">{_e("/".join(c.report.split("/")[-2:]))}</a>',
        ),
    ]
    tds = "".join(
        f'<td class="{_e(col.split()[0].lower())}" data-sort="{_e(key)}">{body}</td>'
        for col, (key, body) in zip(COLUMNS, cells, strict=True)
    )
    return f'<tr class="{classes}" {data}>{tds}</tr>'


def render_html(m: Matrix, plots: Sequence[tuple[str, bytes]] = ()) -> str:
    """plots: (caption, PNG bytes), embedded as data URIs so the page is one file."""
    n = m.counts()
    filters = "".join(
        _select(name, label, sorted({_attrs(c)[name] for c in m.cells})) for name, label in FILTERS
    )
    filters += '<label><input type="checkbox" id="f-transition"> transitions only</label>'
    if m.env_key:
        filters += (
            f'<label><input type="checkbox" id="f-env"> this machine (<code>{_e(m.env_key)}</code>)</label>'
        )
    head = "".join(f'<th scope="col">{_e(c)}</th>' for c in COLUMNS)
    rows = "\n".join(_row(c) for c in m.cells)
    figures = "".join(
        f'<figure><img alt="{_e(cap)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'
        f"<figcaption>{_e(cap)}</figcaption></figure>"
        for cap, png in plots
    )
    summary = (
        f"{n['cells']} cells from {len(m.sources)} result files: {n['good']} good, {n['bad']} bad, "
        f"{n['skip']} untestable; {n['transitions']} transitions (highlighted), {n['conflicts']} with "
        "conflicting evidence"
    )
    skipped = "".join(f"<li>{_e(s)}</li>" for s in m.skipped)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>abbisect serving matrix</title><style>{CSS}</style></head>
<body>
<h1>abbisect serving matrix</h1>
<p id="summary">{_e(summary)}.</p>
<div class="controls">{filters}<span>showing <output id="shown">{n["cells"]}</output> of
<span id="total">{n["cells"]}</span></span></div>
<table id="cells"><thead><tr>{head}</tr></thead>
<tbody>
{rows}
</tbody></table>
{f"<h2>Pictures</h2>{figures}" if figures else ""}
{f"<h2>Not read</h2><ul>{skipped}</ul>" if skipped else ""}
<script>{JS}</script>
</body></html>
"""
