"""`memd status`: what the daemon is and has done, from state and the pid file only.

It never imports the model SDK and answers when the daemon is down. Its JSON
form is a stable interface (README, "memd status --json").
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from memd import __version__, state
from memd import settings as st
from memd.clock import duration_text, local_text, system_clock
from memd.daemon import registry
from memd.tree import Home

RUNS_SHOWN = 5


def gather(home: Home, now: datetime | None = None) -> dict[str, Any]:
    now = now or system_clock()
    s = st.load(home.settings_file)
    provider, wait_reason = st.effective_provider(s, memd_dir=home.memd_dir)
    from memd.daemon.lock import daemon_alive  # noqa: PLC0415 - start-up
    data: dict[str, Any] = {
        "home": str(home.root),
        "version": __version__,
        "daemon": _daemon(daemon_alive(home)),
        "provider": {"configured": s.memd.provider, "effective": provider, "waiting": wait_reason,
                     "small_model": s.memd.small_model, "strong_model": s.memd.strong_model},
        "jobs": {},
        "model": {"calls": 0, "input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0,
                  "cache_write_tokens": 0, "failed_calls": 0, "budget": s.memd.daily_token_budget},
        "sessions": {"count": 0, "paused": 0},
        "ledger": {"ok": True, "stuck": [], "held_back": [], "unknown_record_types": {}},
        "hooks": {"days": []},
        "proposals": _proposals(home, now),
        "sync": _sync(home, s),
        "warnings": list(s.warnings),
    }
    if not home.state_db.exists():
        data["warnings"].append(f"no state yet at {home.state_db}: memd has not scanned this home")
        return data
    conn = state.connect(home.state_db, readonly=True)
    try:
        due_all, acts = _before_horizon(conn, home, s, now)
        _jobs(conn, home, s, now, data, due_all, acts)
        _spending(conn, home, s, now, data, due_all, acts)
        _model(conn, now, data)
        _week(conn, home, now, data)
        _sessions(conn, data)
        _ledger(conn, now, data)
        _hooks(conn, now, data)
        _problems(conn, data)
    finally:
        conn.close()
    return data


def _proposals(home: Home, now: datetime) -> dict[str, Any]:
    """Review mode's queue: how many proposals wait, and the oldest's age (`memd review`)."""
    from memd.write.proposals import summary  # noqa: PLC0415 - start-up

    return summary(home, now)


def _sync(home: Home, s: st.Settings) -> dict[str, Any]:
    """Memory on several machines (`memd.sync.run`): the last sync, how far each side is ahead, files kept out."""
    from memd.sync.run import status  # noqa: PLC0415 - start-up

    return status(home, s)


def _daemon(info: dict[str, Any] | None) -> dict[str, Any]:
    if info is None:
        return {"running": False}
    return {"running": True, **{k: info.get(k) for k in ("pid", "since", "version", "home")}}


def _before_horizon(conn: Any, home: Home, s: st.Settings, now: datetime) -> tuple[dict[str, Any], Any]:
    """What the session jobs' due checks find before the backfill horizon (`due_all`), and every session's
    activity, read once: the jobs' due counts and the backlog both need them (at 100,000 sessions each read
    is about a third of a second, and `status` made four)."""
    from memd.job.backfill import FEW, activity  # noqa: PLC0415 - start-up
    from memd.job.context import JobContext  # noqa: PLC0415 - start-up

    ctx = JobContext(home, s, conn, lambda: now, None)
    due_all: dict[str, Any] = {}
    for job in registry.all_jobs():
        if hasattr(job, "due_all"):
            try:
                due_all[job.NAME] = list(job.due_all(ctx))
            except Exception as exc:
                due_all[job.NAME] = exc
    many = sum(len(v) for v in due_all.values() if isinstance(v, list)) > FEW
    return due_all, (activity(conn) if many else None)


def _jobs(conn: Any, home: Home, s: st.Settings, now: datetime, data: dict[str, Any], due_all: dict[str, Any],
          acts: Any) -> None:  # fmt: skip
    """Each job's recent runs, its last failure and what is due. A session job's due list is its `due_all`
    within the horizon, as its own `due` computes it (`memd.job.backfill.keep_recent`)."""
    from memd.job.backfill import keep_recent  # noqa: PLC0415 - start-up
    from memd.job.context import JobContext  # noqa: PLC0415 - start-up
    ctx = JobContext(home, s, conn, lambda: now, None)
    for job in registry.all_jobs():
        runs = [_run_row(dict(r)) for r in conn.execute(
            "SELECT run_id, target, started_at, finished_at, outcome, duration_ms, reason, pid FROM runs "
            "WHERE job=? ORDER BY id DESC LIMIT ?", (job.NAME, RUNS_SHOWN))]  # fmt: skip
        fail = conn.execute(
            "SELECT run_id, target, started_at, error FROM runs WHERE job=? AND outcome='failed' ORDER BY id DESC LIMIT 1",
            (job.NAME,),
        ).fetchone()
        try:
            found = due_all.get(job.NAME)
            if isinstance(found, Exception):
                raise found
            targets = job.due(ctx) if found is None else keep_recent(conn, s, now, found, acts)
            due = [str(t) for t in targets]
        except Exception as exc:
            due = []
            data["warnings"].append(f"{job.NAME}: cannot tell what is due ({exc})")
        data["jobs"][job.NAME] = {
            "trigger": job.TRIGGER,
            "last_runs": runs,
            "last_failure": None if fail is None else dict(fail),
            "due": len(due),
            "due_targets": due[:10],
        }


def _spending(conn: Any, home: Home, s: st.Settings, now: datetime, data: dict[str, Any],
              due_all: dict[str, Any], acts: Any) -> None:  # fmt: skip
    """What could be spent and is not (issue 21): the backlog past `memory.backfillDays`, a
    usage-limit pause of claude-code, and a logged-in Claude Code memd does not use (with its rate)."""
    import os  # noqa: PLC0415 - start-up

    from memd.job.backfill import backlog  # noqa: PLC0415 - start-up
    from memd.llm.claudehome import calls_per_day, read_pause, switch_hint  # noqa: PLC0415 - start-up
    from memd.llm.prices import load_prices  # noqa: PLC0415 - start-up

    found = {name: v for name, v in due_all.items() if isinstance(v, list)}
    data["backlog"] = backlog(conn, s, now, found, load_prices(home.memd_dir)[0], acts=acts).as_dict()
    pause = read_pause(home.memd_dir, now)
    data["provider"]["paused_until"] = None if pause is None else pause["until"].isoformat(timespec="minutes")
    hint = switch_hint(s.memd.claude_path, os.environ, data["provider"]["effective"])
    if hint is not None:
        hint["calls_per_day"] = round(calls_per_day(conn, now), 1)
        hint["settings_file"] = str(home.settings_file)
    data["provider"]["claude_code"] = hint


def _run_row(r: dict[str, Any]) -> dict[str, Any]:
    """A run without an end is running while its process lives, interrupted once it died."""
    pid = r.pop("pid", None)
    if r["finished_at"] is None:
        r["outcome"] = "running" if state.process_alive(pid) else "interrupted"
    return r


def _model(conn: Any, now: datetime, data: dict[str, Any]) -> None:
    row = conn.execute(
        "SELECT COUNT(*), COALESCE(SUM(input_tokens),0), COALESCE(SUM(output_tokens),0), "
        "COALESCE(SUM(cache_read_tokens),0), COALESCE(SUM(cache_write_tokens),0), COALESCE(SUM(1-ok),0) "
        "FROM model_calls WHERE day=?",
        (now.date().isoformat(),),
    ).fetchone()
    keys = ("calls", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "failed_calls")
    data["model"].update(dict(zip(keys, (int(x) for x in row))))


WEEK_DAYS = 7


def _week(conn: Any, home: Home, now: datetime, data: dict[str, Any]) -> None:
    """The last 7 UTC days' calls, tokens and price (`memd cost` shows each day and job)."""
    from memd.llm.prices import load_prices  # noqa: PLC0415 - start-up
    from memd.llm.usage import JobUsage, usage_by_day  # noqa: PLC0415 - start-up

    prices, _problem = load_prices(home.memd_dir)
    week = JobUsage()
    for d in usage_by_day(conn, now.date(), WEEK_DAYS, prices):
        t = d.total
        week.add(t.calls, t.input_tokens, t.output_tokens, t.cache_read_tokens, t.cache_write_tokens, t.cost_usd)
    data["model"]["last_7_days"] = {**week.as_json(), "prices_as_of": prices.as_of}


def _sessions(conn: Any, data: dict[str, Any]) -> None:
    from memd.ledger.sessions import counts  # noqa: PLC0415 - start-up
    data["sessions"] = counts(conn)


HELD_SHOWN = 10


def _ledger(conn: Any, now: datetime, data: dict[str, Any]) -> None:
    """Health is progress: sessions the ledger cannot advance fail the status; sessions held back
    by a tool call still waiting for its result, and record types memd did not recognise, are shown."""
    from memd.ledger.query import held_back, stuck_sessions, unknown_record_types  # noqa: PLC0415 - start-up

    stuck = stuck_sessions(conn)
    held = held_back(conn)
    from memd.clock import parse_iso  # noqa: PLC0415 - start-up
    for h in held:
        since = parse_iso(str(h.get("since") or ""))
        h["waiting_seconds"] = None if since is None else max(0, int((now - since).total_seconds()))
    data["ledger"] = {"ok": not stuck, "stuck": stuck, "held_back": held[:HELD_SHOWN],
                      "held_back_count": len(held), "unknown_record_types": unknown_record_types(conn)}  # fmt: skip


HOOK_DAYS = 7


def _hooks(conn: Any, now: datetime, data: dict[str, Any]) -> None:
    """What the agent hooks surfaced on each of the last days (recalls per day), newest first."""

    from datetime import timedelta  # noqa: PLC0415 - start-up
    days = [(now.date() - timedelta(days=i)).isoformat() for i in range(HOOK_DAYS)]
    from memd.agent.hooks import day_counts  # noqa: PLC0415 - start-up
    data["hooks"] = {"days": day_counts(conn, days)}


def _problems(conn: Any, data: dict[str, Any]) -> None:
    for r in conn.execute("SELECT source, path, reason FROM problems ORDER BY source, path LIMIT 50"):
        data["warnings"].append(f"{r['path']}: {r['reason']}")


def _ledger_lines(lg: dict[str, Any]) -> list[str]:
    out = []
    stuck = lg.get("stuck") or []
    if stuck:
        first = stuck[0]
        out.append(f"FAILING ledger: {len(stuck)} session(s) cannot advance; {first['key']}/{first['session_id']}: "
                   f"{first['reason']} (since {first['since']})")  # fmt: skip
    held = lg.get("held_back") or []
    if held:
        longest = max((h.get("waiting_seconds") or 0) for h in held)
        out.append(f"held back: {lg.get('held_back_count', len(held))} session(s) wait for a tool call's result "
                   f"(longest {duration_text(longest)}); reading goes on once the conversation moves past it")  # fmt: skip
    unknown = lg.get("unknown_record_types") or {}
    if unknown:
        out.append("unrecognised record types: " + ", ".join(f"{t} ×{n}" for t, n in list(unknown.items())[:5]))
    return out


def _job_table(jobs: dict[str, Any]) -> list[str]:
    """One row a job: its last run (local time), outcome, how long it took, what is due, its last failure."""
    from memd.output import render as table  # noqa: PLC0415 - start-up

    rows = []
    for name, j in jobs.items():
        last = j["last_runs"][0] if j["last_runs"] else {}
        fail = j["last_failure"]
        ms = last.get("duration_ms")
        rows.append([name, local_text(last.get("started_at")), last.get("outcome") or ("running" if last else "-"),
                     "-" if ms is None else duration_text(ms / 1000), j["due"],
                     f"{local_text(fail['started_at'])} {(fail['error'] or '')[:60]}".rstrip() if fail else "-"])  # fmt: skip
    return table(["JOB", "LAST RUN", "OUTCOME", "TOOK", "DUE", "LAST FAILURE"], rows, right=(3, 4))


def _spending_lines(d: dict[str, Any]) -> list[str]:
    """The claude-code pause or offer, and the backlog, one line each (see `_spending`)."""
    out, p = [], d["provider"]
    if p.get("paused_until"):
        out.append(f"model calls paused until {local_text(p['paused_until'])} (a usage limit of Claude Code)")
    if cc := p.get("claude_code"):
        out.append(f"Claude Code is logged in here: memd could use it for about {cc['calls_per_day']:g} calls a day "
                   f"(last 7 days' rate; they count against your plan): `{cc['switch']}` switches")  # fmt: skip
    b = d.get("backlog") or {}
    if b.get("sessions"):
        usd = "price unknown" if b["estimated_usd"] is None else f"about ${b['estimated_usd']:.2f}"
        out.append(f"backlog: {b['sessions']} sessions idle before {str(b['horizon'])[:10]} wait ({b['extract']} "
                   f"extractions, {b['summary']} summaries, ~{b['estimated_tokens']:,} tokens, {usd} at prices of "
                   f"{b['prices_as_of']}): `memd backfill` runs them")  # fmt: skip
    return out


def render(d: dict[str, Any]) -> str:
    """The terminal form: short, one fact a line."""
    out = []
    dm = d["daemon"]
    if dm["running"]:
        out.append(f"daemon: running (pid {dm.get('pid')}, since {local_text(dm.get('since'))}, memd {dm.get('version')})")
    else:
        out.append("daemon: not running (start it with `memd run`, or `memd install` for a service)")
    out.append(f"home: {d['home']}")
    p = d["provider"]
    prov = f"provider: {p['effective']}" + (" (configured auto)" if p["configured"] == "auto" else "")
    if p["effective"] == "offline":
        prov += " — deterministic, no model calls"
    if p["waiting"]:
        prov += f" — {p['waiting']}"
    out.append(prov)
    out.extend(_spending_lines(d))
    out.append(f"sessions: {d['sessions']['count']} ({d['sessions']['paused']} paused)")
    out.extend(_ledger_lines(d.get("ledger") or {}))
    active = [x for x in d.get("hooks", {}).get("days", []) if any(x[c] for c in ("context", "prompts", "compacts"))]
    if active:
        out.append("recall by day: " + "; ".join(
            f"{x['day']} {x['recalls']} of {x['prompts']} prompts ({x['memories']} memories), "
            f"{x['context']} session starts" for x in active))  # fmt: skip
    pr = d.get("proposals") or {}
    if pr.get("waiting"):
        from memd.history.provenance import age_text  # noqa: PLC0415 - start-up
        out.append(f"proposals: {pr['waiting']} waiting for review, the oldest {age_text(pr['oldest_age_seconds'] or 0)} old"
                   " (`memd review`)")  # fmt: skip
    if (d.get("sync") or {}).get("git"):
        from memd.sync.run import render_status  # noqa: PLC0415 - start-up
        out.append(render_status(d["sync"]))
    if ((d.get("sync") or {}).get("quarantined") or {}).get("count"):
        from memd.sync.run import render_quarantine  # noqa: PLC0415 - start-up
        out.append(render_quarantine(d["sync"]) or "")
    m = d["model"]
    out.append(f"model today: {m['calls']} calls, {m['input_tokens']} in / {m['output_tokens']} out tokens"
               f" (cache read {m['cache_read_tokens']}), budget {m['budget']}")  # fmt: skip
    wk = m.get("last_7_days")
    if wk:
        c = wk["cost_usd"]
        cost = "unknown" if c is None else f"${c:.4f}" if c < 1 else f"${c:,.2f}"
        out.append(f"model last 7 days: {wk['calls']} calls, {wk['tokens']:,} tokens, {cost} at the prices of "
                   f"{wk['prices_as_of']} (`memd cost`)")  # fmt: skip
    out.append("")
    out.extend(_job_table(d["jobs"]))
    if d["warnings"]:
        out.append("")
        out.append(f"warnings ({len(d['warnings'])}):")
        out.extend(f"  {w}" for w in d["warnings"][:20])
    return "\n".join(out)
