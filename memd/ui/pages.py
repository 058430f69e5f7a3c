"""The pages as HTML, rendered on the server with the standard library (`string.Template`, `html.escape`).

Every value from the home is escaped where it enters the markup (`e`): memory text, a model's
answer and transcript lines are data, never markup. The only script is the live-update poll
(`SCRIPT`), inline under the page's nonce; the only style sheet is inline too: nothing is fetched
from a network, and the content policy (`memd.ui.app`) allows nothing else.

Forms that change something carry the page's write token (`csrf`) and where to come back to.
"""

from __future__ import annotations

from html import escape
from string import Template
from typing import Any
from urllib.parse import urlencode

from memd.history.provenance import age_text
from memd.ui.chart import COLOURS, OTHER, svg
from memd.ui.cost import money

NAV = (("/", "Memories"), ("/review", "Review"), ("/daemon", "Daemon"), ("/cost", "Cost"), ("/dreams", "Dreams & sync"))

STYLE = """
:root{--fg:#1f2937;--mut:#6b7280;--line:#e5e7eb;--bg:#fff;--acc:#2563eb;--warn:#b45309;--bad:#b91c1c;--ok:#047857}
*{box-sizing:border-box}body{margin:0;font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;color:var(--fg);background:var(--bg)}
header{display:flex;gap:18px;align-items:center;padding:10px 20px;border-bottom:1px solid var(--line);flex-wrap:wrap}
header b{font-size:16px}header nav a{margin-right:14px;color:var(--acc);text-decoration:none}header nav a.on{font-weight:600;text-decoration:underline}
.home{color:var(--mut);font-family:ui-monospace,monospace;font-size:12px}#state{margin-left:auto;font-size:12px}
main{padding:16px 20px;max-width:1200px}h1{font-size:20px;margin:4px 0 12px}h2{font-size:16px;margin:22px 0 8px}
table{border-collapse:collapse;width:100%;margin:6px 0 12px}th,td{text-align:left;padding:4px 8px;border-bottom:1px solid var(--line);vertical-align:top}
th{font-weight:600;color:var(--mut);font-size:12px;text-transform:uppercase}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
a{color:var(--acc)}.mut{color:var(--mut)}.warn{color:var(--warn)}.bad{color:var(--bad)}.ok{color:var(--ok)}
.tag{display:inline-block;padding:0 6px;border-radius:8px;background:#eef2ff;font-size:12px}
pre{background:#f8fafc;border:1px solid var(--line);padding:8px;overflow:auto;white-space:pre-wrap;word-break:break-word}
pre.diff .add{color:#166534;background:#dcfce7}pre.diff .del{color:#991b1b;background:#fee2e2}pre.diff .hunk{color:#6b21a8}
.card{border:1px solid var(--line);border-radius:6px;padding:10px 14px;margin:10px 0}
form.inline{display:inline}button{font:inherit;padding:3px 10px;border:1px solid #cbd5e1;border-radius:4px;background:#f1f5f9;cursor:pointer}
button.primary{background:var(--acc);color:#fff;border-color:var(--acc)}textarea{width:100%;min-height:220px;font:12px ui-monospace,monospace}
.flash{padding:8px 12px;border-radius:6px;background:#ecfdf5;border:1px solid #a7f3d0;margin-bottom:10px}
.flash.error{background:#fef2f2;border-color:#fecaca}#stale{background:#fffbeb;border:1px solid #fde68a;padding:6px 10px;margin:8px 20px}
svg.chart{width:100%;max-width:900px;height:auto}svg .grid{stroke:#e5e7eb}svg .axis{font-size:11px;fill:#6b7280}
svg .budget{stroke:#b91c1c;stroke-dasharray:5 4}.legend span{display:inline-block;width:10px;height:10px;margin:0 4px 0 12px}
""" + "".join(f".c-{job}{{background:{c}}}" for job, c in {**COLOURS, "other": OTHER}.items())

# The live update: poll the cheap fingerprint; when it changes, fetch this page again and swap
# its <main> in (unless the user is typing into a form, then say so instead).
SCRIPT = r"""
(function(){
  var v = document.body.dataset.version, busy = false;
  function local(root){ root.querySelectorAll('time[datetime]').forEach(function(t){
    var d = new Date(t.dateTime); if (isNaN(d)) return;
    t.textContent = t.dataset.show === 'date' ? d.toLocaleDateString() : d.toLocaleString([], {timeZoneName: 'short'}); }); }
  local(document);
  function typing(){ var a = document.activeElement;
    return !!a && (a.tagName === 'TEXTAREA' || a.tagName === 'INPUT') && a.value !== a.defaultValue; }
  async function tick(){
    if (busy) return; busy = true;
    try {
      var r = await fetch('/api/version', {cache: 'no-store', credentials: 'same-origin'});
      if (r.ok) { var j = await r.json();
        if (j.v !== v) {
          if (typing()) { document.getElementById('stale').hidden = false; }
          else { var p = await fetch(location.href, {cache: 'no-store', credentials: 'same-origin'});
            if (p.ok) { var t = (await p.text()).replace(/<style[\s\S]*?<\/style>/g, '').replace(/<script[\s\S]*?<\/script>/g, '');
              var d = new DOMParser().parseFromString(t, 'text/html');  // (its style and script carry another nonce)
              document.getElementById('main').replaceWith(d.getElementById('main')); local(document.getElementById('main'));
              document.getElementById('state').replaceWith(d.getElementById('state'));
              v = d.body.dataset.version; document.body.dataset.version = v; } } } }
    } catch (e) { /* the server stopped: nothing to update */ }
    busy = false;
  }
  setInterval(tick, 1500);
})();
"""

LAYOUT = Template("""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>memd — $title</title><link rel="icon" href="data:,"><style nonce="$nonce">$style</style></head>
<body data-version="$version"><header><b>memd</b><nav>$nav</nav><span class="home">$home</span>$state</header>
<div id="stale" hidden>memd did something meanwhile: <a href="">reload</a> when you are done typing.</div>
<main id="main">$flash$body</main>
<script nonce="$nonce">$script</script></body></html>
""")


def e(x: Any) -> str:
    return escape("" if x is None else str(x), quote=True)


def layout(*, title: str, path: str, body: str, nonce: str, version: str, home: str, daemon: dict[str, Any],
           flash: str = "", error: str = "", waiting: int = 0) -> str:  # fmt: skip
    on = ' class="on"'
    nav = "".join(
        f'<a href="{href}"{on if href == path else ""}>{label}'
        f'{f" ({waiting})" if href == "/review" and waiting else ""}</a>' for href, label in NAV)  # fmt: skip
    state = (f'<span id="state" class="ok">daemon running (pid {e(daemon.get("pid"))})</span>' if daemon.get("running")
             else '<span id="state" class="warn">daemon not running</span>')  # fmt: skip
    note = (f'<div class="flash">{e(flash)}</div>' if flash else "") + (f'<div class="flash error">{e(error)}</div>' if error else "")
    return LAYOUT.substitute(title=e(title), nonce=nonce, style=STYLE, version=version, nav=nav, home=e(home),
                             state=state, flash=note, body=body, script=SCRIPT)  # fmt: skip


def form(action: str, csrf: str, back: str, fields: dict[str, Any], button: str, *, primary: bool = False,
         inline: bool = True, extra: str = "") -> str:  # fmt: skip
    hidden = "".join(f'<input type="hidden" name="{e(k)}" value="{e(v)}">' for k, v in fields.items())
    cls = ' class="primary"' if primary else ""
    fcls = ' class="inline"' if inline else ""
    return (f'<form method="post" action="{e(action)}"{fcls}>'
            f'<input type="hidden" name="csrf" value="{e(csrf)}"><input type="hidden" name="back" value="{e(back)}">'
            f'{hidden}{extra}<button type="submit"{cls}>{e(button)}</button></form>')  # fmt: skip


def diff_html(text: str) -> str:
    out = []
    for line in (text or "").splitlines():
        cls = ("hunk" if line.startswith("@@") else "add" if line.startswith("+") and not line.startswith("+++")
               else "del" if line.startswith("-") and not line.startswith("---") else "")  # fmt: skip
        out.append(f'<span class="{cls}">{e(line)}</span>' if cls else e(line))
    return '<pre class="diff">' + ("\n".join(out) or "(no change)") + "</pre>"


def when(iso: Any, *, date_only: bool = False) -> str:
    """A UTC time as the server knows it; the page's script shows it in the reader's zone."""
    if not iso:
        return "-"
    text = str(iso)[:10] if date_only else str(iso).replace("T", " ").replace(".000Z", "Z")
    kind = "date" if date_only else "time"
    return f'<time datetime="{e(iso)}" data-show="{kind}" title="{e(iso)}">{e(text)}</time>'


def where(scope: str) -> str:
    return "global drawer" if scope == "global" else f"project {scope.partition(':')[2]}"


def memory_link(scope: str, file: str, label: str) -> str:
    return f'<a href="/memory?{e(urlencode({"scope": scope, "file": file}))}">{e(label)}</a>'


def duration(ms: Any) -> str:
    if ms is None:
        return "-"
    ms = int(ms)
    if ms < 1000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    return f"{ms // 60_000} min {ms % 60_000 // 1000} s"


# --------------------------------------------------------------------------- memories


def home_page(scopes: list[tuple[str, list[dict[str, Any]], list[str]]], query: str) -> str:
    body = [f'<h1>Memories</h1><form method="get" action="/"><input type="search" name="q" value="{e(query)}" '
            'placeholder="search name, description, text" size="40"> <button type="submit">Search</button>'
            + (' <a href="/">clear</a>' if query else "") + "</form>"]  # fmt: skip
    shown = 0
    for scope, rows, problems in scopes:
        if query and not rows:
            continue
        shown += len(rows)
        body.append(f'<h2 class="scope" data-scope="{e(scope)}">{e(where(scope).capitalize())} '
                    f'<span class="mut">({len(rows)})</span></h2>')  # fmt: skip
        if rows:
            body.append("<table><tr><th>Name</th><th>Type</th><th>Description</th><th>Age</th></tr>")
            for r in rows:
                stale = f' <span class="warn" title="{e(r["stale"])}">stale</span>' if r["stale"] else ""
                body.append(f'<tr><td>{memory_link(scope, r["file"], r["name"])}</td><td><span class="tag">{e(r["type"])}'
                            f'</span></td><td>{e(r["description"])}</td><td>{age_text(r["age_seconds"])}{stale}</td></tr>')  # fmt: skip
            body.append("</table>")
        else:
            body.append('<p class="mut">no memories yet</p>')
        body.extend(f'<p class="warn">problem: {e(p)}</p>' for p in problems)
    if query and not shown:
        body.append(f'<p class="mut">no memory matches {e(query)!s}</p>')
    return "".join(body)


def _why(why: dict[str, Any]) -> str:
    out = []
    for s in why.get("sources") or []:
        if s.get("via"):
            out.append(f'<p>via {e(s["via"])} <span class="mut">{e(s.get("ts"))}</span></p>')
            continue
        out.append(f'<div class="card"><b>session {e(s.get("session"))}</b> <span class="mut">{e(s.get("ts"))} '
                   f'{e(s.get("transcript"))}</span>')  # fmt: skip
        for ln in s.get("lines") or []:
            out.append(f'<pre class="line"><span class="mut">[{e(ln.get("ts") or "?")}] user:</span> {e(ln["text"])}</pre>')
        if s.get("not_user_lines"):
            out.append(f'<p class="mut">{e(s["not_user_lines"])} more recorded message(s) are not the user\'s own lines</p>')
        if s.get("problem"):
            out.append(f'<p class="warn">{e(s["problem"])}</p>')
        out.append("</div>")
    for m in why.get("merged_from") or []:
        inner = m.get("memory")
        out.append(f'<div class="card"><b>merged from {e(m["name"])}</b> <span class="mut">{e(m.get("run"))}</span>'
                   + (_why(inner) if inner else f'<p class="warn">{e(m.get("problem"))}</p>') + "</div>")  # fmt: skip
    if not out:
        sid = why.get("session")
        out.append(f'<p class="mut">no recorded sources{f" (written for session {e(sid)}, no message ids kept)" if sid else ""}</p>')
    return "".join(out)


def memory_page(d: dict[str, Any], csrf: str, back: str) -> str:
    r, scope = d["row"], d["scope"]
    if r is None:
        return (f'<h1>{e(d["file"])}</h1><p class="warn">not in the {e(where(scope))} now (forgotten, merged or '
                f'undone); its history is below: undo the run that removed it to bring it back.</p>'
                + _history(d, csrf, back))  # fmt: skip
    stale = f'<p class="warn">{e(r["stale"])}</p>' if r["stale"] else ""
    body = [f'<h1>{e(r["name"])}</h1><p><span class="tag">{e(r["type"])}</span> {e(where(scope))} · '
            f'<code>{e(r["file"])}</code> · {age_text(r["age_seconds"])} old</p>{stale}'
            f'<p>{e(r["description"])}</p><pre class="text">{e(d["text"])}</pre>']  # fmt: skip
    area = f'<textarea name="text" spellcheck="false">{e(d["text"])}</textarea><br>'
    body.append("<details><summary>Edit</summary>"
                + form("/action/edit-memory", csrf, back, {"scope": scope, "file": r["file"], "base": d["base"]},
                       "Save (validated; undoable)", primary=True, inline=False, extra=area) + "</details>")  # fmt: skip
    body.append(f'<h2>Why: where it came from</h2>{_why(d["why"])}')
    body.append(_history(d, csrf, back))
    return "".join(body)


def _history(d: dict[str, Any], csrf: str, back: str) -> str:
    body = [f'<h2>History <span class="mut">({len(d["history"])} run(s) changed it)</span></h2>']
    if not d["history"]:
        body.append('<p class="mut">no memd run changed it (written before memd kept history, or by hand)</p>')
    for h in d["history"]:
        undo = form("/action/undo", csrf, back, {"scope": d["scope"], "run": h["run"]}, "Undo this run")
        body.append(f'<div class="card run" data-run="{e(h["run"])}"><b>{e(h["run"])}</b> {e(h["kind"])}'
                    f'{" · " + e(h["job"]) if h.get("job") else ""} <span class="mut">{when(h["time"])} {e(h["reason"])}</span> '
                    f'{undo}{diff_html(h["diff"])}</div>')  # fmt: skip
    return "".join(body)


# --------------------------------------------------------------------------- review


def review_page(rows: list[dict[str, Any]], csrf: str, back: str, review_on: bool) -> str:
    mode = "on: extraction and dream wait for you here" if review_on else "off (memory.review): memd writes directly"
    body = [f'<h1>Review</h1><p class="mut">review mode is {e(mode)}</p>']
    if not rows:
        body.append('<p class="mut">no proposals waiting</p>')
    for p in rows:
        age = age_text(p["age_seconds"]) + " ago" if p["age_seconds"] is not None else ""
        check = (f'<p class="bad">refused at {e(p["check"].get("time"))}: {e(p["check"].get("reason"))}</p>'
                 if p["check"] else "")  # fmt: skip
        files = "".join(f'<li>{e(f["action"])} {e(f["name"])} <span class="mut">({e(where(f["scope"]))}, {e(f["file"])})</span></li>'
                        for f in p["files"])  # fmt: skip
        edits = "".join(
            f'<details><summary>Edit {e(f["file"])}</summary>'
            + form("/action/edit-proposal", csrf, back, {"id": p["id"], "n": f["n"]}, "Save the proposed file",
                   inline=False, extra=f'<textarea name="text" spellcheck="false">{e(f["text"])}</textarea><br>')
            + "</details>" for f in p["files"] if f["text"] is not None)  # fmt: skip
        body.append(f'<div class="card proposal" data-id="{e(p["id"])}"><b>{e(p["id"])}</b> {e(p["job"])} '
                    f'({e(p["kind"])}) <span class="mut">{e(age)}</span>{" · edited" if p["edited"] else ""}'
                    f'<p>{e(p["reason"])}</p>{check}<ul>{files}</ul>{diff_html(p["diff"])}'
                    + form("/action/accept", csrf, back, {"id": p["id"]}, "Accept", primary=True) + " "
                    + form("/action/reject", csrf, back, {"id": p["id"]}, "Reject") + edits + "</div>")  # fmt: skip
    return "".join(body)


# --------------------------------------------------------------------------- daemon


def daemon_page(d: dict[str, Any]) -> str:
    dm, p = d["daemon"], d["provider"]
    state = (f'running, pid {e(dm.get("pid"))}, since {when(dm.get("since"))}, memd {e(dm.get("version"))}' if dm["running"]
             else "not running (start it with <code>memd run</code>, or <code>memd install</code> for a service)")  # fmt: skip
    m = d["model"]
    body = [f'<h1>Daemon</h1><p>daemon: {state}</p><p>provider: {e(p["effective"])}'
            f'{" — " + e(p["waiting"]) if p.get("waiting") else ""} · small model {e(p["small_model"])} · '
            f'strong model {e(p["strong_model"])}</p><p>model today: {m["calls"]} calls, {m["input_tokens"]:,} in / '
            f'{m["output_tokens"]:,} out tokens, budget {m["budget"]:,} · sessions {d["sessions"]["count"]} '
            f'({d["sessions"]["paused"]} paused)</p>']  # fmt: skip
    body.append("<h2>Jobs</h2><table><tr><th>Job</th><th>When</th><th>Last run</th><th>Outcome</th>"
                '<th class="n">Duration</th><th class="n">Due</th><th>Due next</th><th>Last failure</th></tr>')  # fmt: skip
    for name, j in d["jobs"].items():
        last = j["last_runs"][0] if j["last_runs"] else {}
        fail = j["last_failure"]
        due = ", ".join(j["due_targets"][:3]) + (" …" if j["due"] > 3 else "")
        body.append(f'<tr><td>{e(name)}</td><td class="mut">{e(j["trigger"])}</td><td>{when(last.get("started_at"))}</td>'
                    f'<td>{_outcome(last.get("outcome"))}</td><td class="n">{duration(last.get("duration_ms"))}</td>'
                    f'<td class="n">{j["due"]}</td><td class="mut">{e(due)}</td>'
                    f'<td class="bad">{e((fail["started_at"] + " " + (fail["error"] or "")[:120]) if fail else "")}</td></tr>')  # fmt: skip
    body.append("</table><h2>Timeline <span class=\"mut\">(latest runs first)</span></h2>"
                '<table class="timeline"><tr><th>Started</th><th>Job</th><th>Target</th><th>Outcome</th>'
                '<th class="n">Duration</th><th>Why / error</th></tr>')  # fmt: skip
    for r in d["timeline"]:
        body.append(f'<tr data-run="{e(r["run_id"])}"><td>{when(r["started_at"])}</td><td>{e(r["job"])}</td>'
                    f'<td class="mut">{e(r["target"])}</td><td>{_outcome(r["outcome"] or "running")}</td>'
                    f'<td class="n">{duration(r["duration_ms"])}</td>'
                    f'<td>{e(r["reason"])}{" <span class=bad>" + e(r["error"]) + "</span>" if r["error"] else ""}</td></tr>')  # fmt: skip
    if not d["timeline"]:
        body.append('<tr><td colspan="6" class="mut">no runs yet</td></tr>')
    body.append(f'</table><h2>Sessions <span class="mut">({len(d["session_rows"])} of {d.get("sessions_total", 0)}, '
                'latest first)</span></h2><table class="sessions"><tr><th>Date</th><th>Title</th><th>Project</th>'
                '<th class="n">Turns</th><th class="n">Tokens</th><th>Summary</th><th>Paused</th></tr>')  # fmt: skip
    for s in d["session_rows"]:
        body.append(f'<tr><td>{when(s.get("first_ts"), date_only=True)}</td>'
                    f'<td>{e(s["title"] or s["session_id"])}</td><td class="mut">{e(s["key"])}</td>'
                    f'<td class="n">{s["human_turns"]}</td><td class="n">{s["tokens"]:,}</td>'
                    f'<td class="mut">{e(s["summary"] or "")}</td><td>{"paused" if s["paused"] else ""}</td></tr>')  # fmt: skip
    body.append("</table>")
    return "".join(body)


def _outcome(o: Any) -> str:
    cls = {"ok": "ok", "failed": "bad", "interrupted": "bad", "deferred": "warn"}.get(str(o), "mut")
    return f'<span class="{cls}">{e(o or "-")}</span>'


# --------------------------------------------------------------------------- cost


def cost_page(r: dict[str, Any], today_tokens: int) -> str:
    p = r["prices"]
    jobs = sorted({j for d in r["by_day"] for j in d["jobs"]})
    legend = "".join(f'<span class="c-{e(j) if j in COLOURS else "other"}"></span>{e(j)}' for j in jobs)
    t = r["total"]
    body = [f'<h1>Cost</h1><p>Last {r["days"]} days ({e(r["from"])} .. {e(r["to"])}, UTC): <b>{t["tokens"]:,} tokens</b> '
            f'in {t["calls"]} calls, <b>{money(t["cost_usd"])}</b> at the prices of {e(p["as_of"])} '
            f'<span class="mut">({e(p["source"])}; <code>memd/prices.json</code> overrides them)</span></p>'
            f'<p>Daily budget: {r["budget"]:,} tokens; today {today_tokens:,} used.</p>']  # fmt: skip
    if p["problem"]:
        body.append(f'<p class="warn">{e(p["problem"])}</p>')
    body.append(f'{svg(r["by_day"], int(r["budget"]))}<p class="legend">{legend}</p>')
    head = ('<tr><th>{}</th><th class="n">Calls</th><th class="n">In</th><th class="n">Out</th>'
            '<th class="n">Cache read</th><th class="n">Cost</th></tr>')  # fmt: skip

    def row(label: str, u: dict[str, Any]) -> str:
        return (f'<tr><td>{e(label)}</td><td class="n">{u["calls"]}</td><td class="n">{u["input_tokens"]:,}</td>'
                f'<td class="n">{u["output_tokens"]:,}</td><td class="n">{u["cache_read_tokens"]:,}</td>'
                f'<td class="n">{money(u["cost_usd"])}</td></tr>')  # fmt: skip

    body.append("<h2>Per job</h2><table>" + head.format("Job") + "".join(row(j, u) for j, u in r["by_job"].items())
                + row("total", t) + "</table>")  # fmt: skip
    used = [d for d in reversed(r["by_day"]) if d["calls"]]
    body.append('<h2>Per day</h2><table class="days">' + head.format("Day") + "".join(row(d["day"], d) for d in used)
                + "</table>" + ("" if used else '<p class="mut">no model calls in this window</p>'))  # fmt: skip
    return "".join(body)


# --------------------------------------------------------------------------- dreams, sync, warnings


def _changes(c: Any) -> str:
    if not isinstance(c, dict):
        return ""
    out = []
    for m in c.get("merged") or []:
        srcs = ", ".join(str(s.get("name")) for s in m.get("sources") or [] if isinstance(s, dict))
        out.append(f'<li>merged {e(srcs)} → {e((m.get("result") or {}).get("name"))} <span class="mut">{e(m.get("reason"))}</span></li>')
    for key in ("rewritten", "deleted", "added"):
        for it in c.get(key) or []:
            if isinstance(it, dict):
                out.append(f'<li>{key} {e(it.get("name"))} <span class="mut">{e(it.get("reason"))}</span></li>')
            else:
                out.append(f"<li>{key} {e(it)}</li>")
    for key in ("updated", "restored", "removed", "brought_back"):
        if c.get(key):
            out.append(f'<li>{key.replace("_", " ")} {e(", ".join(map(str, c[key])))}</li>')
    return "<ul>" + ("".join(out) or '<li class="mut">no file changed</li>') + "</ul>"


def dreams_page(runs: list[dict[str, Any]], status: dict[str, Any], sync_line: str, csrf: str, back: str) -> str:
    body = ["<h1>Dream runs</h1>"]
    if not runs:
        body.append('<p class="mut">no dream has run yet</p>')
    for r in runs:
        scope = str(r.get("scope"))
        undo = form("/action/undo", csrf, back, {"scope": scope, "run": r["run"]}, "Undo") if r.get("kind") != "damaged" else ""
        who = r.get("kind") if r.get("kind") != "undo" else f"undo of {r.get('undo_of')}"
        body.append(f'<div class="card dream" data-run="{e(r["run"])}"><b>{e(r["run"])}</b> {e(who)} · {e(where(scope))} '
                    f'<span class="mut">{when(r.get("time"))} {e(r.get("provider") or "")}'
                    f'{" forced" if r.get("forced") else ""} {e(r.get("reason") or "")}</span> {undo}{_changes(r.get("changes"))}</div>')  # fmt: skip
    sync = status.get("sync") or {}
    body.append(f"<h2>Sync</h2><pre>{e(sync_line)}</pre>")
    if sync.get("conflicts"):
        body.append("<p class=\"warn\">conflicts kept as merge proposals: " + e(", ".join(map(str, sync["conflicts"]))) + "</p>")
    warnings = status.get("warnings") or []
    body.append(f"<h2>Warnings <span class=\"mut\">({len(warnings)})</span></h2>")
    body.append("<ul>" + "".join(f'<li class="warn">{e(w)}</li>' for w in warnings[:100]) + "</ul>" if warnings
                else '<p class="mut">none</p>')  # fmt: skip
    return "".join(body)


def error_page(message: str, back: str) -> str:
    return f'<h1>Not done</h1><div class="flash error">{e(message)}</div><p><a href="{e(back)}">back</a></p>'
