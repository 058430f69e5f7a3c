"""The daemon's side of the hook socket: `memd run` answers `memd context --hook` and `memd recall --hook`
(issue 27 point 3; the wire and the client are memd/agent/hookwire.py).

A hook process that finds `<home>/memd/hook.sock` sends its command, stdin, cwd and the environment that
decides an answer, and writes what comes back; the daemon runs `memd.agent.hooks.respond`, the code the
process would run, with the modules already loaded. So the answer is the one the process would print and
the records (the session's and the day's hook counts, recall's surfaced set, a model call's usage) are
written once, by whichever of the two answered.

Invariants:
- Only what the process would answer the same way is answered: the request's protocol and code stamp are
  this daemon's; its home is this home (the same directory, by whatever path the hook names it: the hook's
  path is used, so the answer names files as the process would); its `HOME` and `TZ` are this process's
  (`~`, the local date); a recall that may call a model has this process's `ANTHROPIC_*`, proxy and
  certificate variables, and the `claude-code` provider is left to the process (it runs `claude` in the
  hook's environment). Anything else gets "no <reason>" and the hook answers itself.
- Settings are read per answer, by the same code (`settings.json` as it is now: no reload needed).
- The work starts only while the hook still waits (its "ok" deadline, then the wait the "ok" named, with
  `START_MARGIN_S` to spare), and an answer past that wait is not sent: a hook that gave up answered
  itself, and this daemon then records nothing for a hook it did not start in time.
- One thread per request; at most `MAX_CLIENTS` at once (more are closed at once: those hooks answer
  themselves). The state and search connections are kept between answers (`memd.agent.hooks.Kept`: opening
  them was most of a short answer's work), each lent to one answer at a time, at most one set per request
  running at once; a file replaced since is opened again. A failure never stops the server. The socket is made 0600 in the private memd directory, only a socket is ever removed from its place,
  and only connections from this user are served (`SO_PEERCRED`, where the system has it).
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memd.agent import hookwire
from memd.clock import process_started
from memd.daemon.socket_server import SocketServer
from memd.tree import Home, resolve_home

READ_TIMEOUT_S = 1.0
MAX_CLIENTS = 8
ANSWER_WAIT_S = 2.0  # what the "ok" grants: the work (~10 ms) and a busy state database (the hooks wait 1 s for it)
MODEL_GRACE_S = 0.5  # a recall that may call a model: until its budget ends (from the hook's start), and this
TAKEN_WAIT_S = 1.0  # from the answer sent to the hook's "taken" line; without it, nothing is recorded here
START_MARGIN_S = 1.0  # the work starts only with this much of the granted wait left
PREPARED_WAIT_S = 0.1  # an answer waits this long at most for the connections a SessionStart's `prepare` holds
SAME_ENV = ("HOME", "TZ")
MODEL_ENV = ("SSL_CERT_FILE", "SSL_CERT_DIR", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY",
             "http_proxy", "https_proxy", "all_proxy", "no_proxy")  # fmt: skip
PAUSE_ENV = "MEMD_TEST_HOOK_PAUSE_S"  # tests: the daemon waits this long after its "ok" (a daemon slow or hung mid-answer)
STALL_ENV = "MEMD_TEST_HOOK_STALL_S"  # tests: ... before it reads a request (a daemon too busy to answer at all)
# What the hooks' answers load: imported when the server starts, so the first hook finds them warm.
WARM = ("memd.agent.hooks", "memd.agent.context", "memd.agent.recall", "memd.agent.candidates", "memd.index.search",
        "memd.index.staleness", "memd.memory.reading", "memd.job.context", "memd.redact.redactor", "memd.keys")  # fmt: skip


class Request:
    """One parsed request (hookwire's wire)."""

    def __init__(self, fields: list[bytes], stdin: bytes) -> None:
        (self.magic, self.protocol, self.stamp, sub, home, cwd, pid, sent, *rest) = fields
        self.sub = sub.decode()
        self.home = os.fsdecode(home) or None
        self.cwd = os.fsdecode(cwd)
        self.pid = int(pid)
        self.sent = float(sent)
        self.streams = tuple(s.decode() for s in rest[:4])
        self.env = dict(os.fsdecode(kv).partition("=")[::2] for kv in rest[4:])
        self.stdin = stdin
        if len(self.streams) != 4 or not os.path.isabs(self.cwd):
            raise ValueError("malformed request")


def read_request(conn: socket.socket) -> Request:
    """One request from `conn` (within `READ_TIMEOUT_S` a read); ValueError when it is not one."""
    buf = b""
    while b"\n" not in buf:
        chunk = conn.recv(4096)
        if not chunk or len(buf) > 64:
            raise ValueError("no request line")
        buf += chunk
    first, _, buf = buf.partition(b"\n")
    n_head, _, n_in = first.partition(b":")
    if not (n_head.isdigit() and n_in.isdigit()) or int(n_head) > hookwire.MAX_HEADER or int(n_in) > hookwire.MAX_STDIN:
        raise ValueError("bad lengths")
    want = int(n_head) + int(n_in)
    while len(buf) < want:
        chunk = conn.recv(max(65536, want - len(buf)))
        if not chunk:
            raise ValueError("cut request")
        buf += chunk
    fields = buf[: int(n_head)].split(b"\0")
    if len(fields) < 12 or fields[0] != hookwire.MAGIC:
        raise ValueError("not a hook request")
    return Request(fields, buf[int(n_head) : want])


def encode(text: str, encoding: str, errors: str) -> bytes:
    """`text` as the hook process's stream would write it: nothing when its encoding cannot (the process's
    write fails, and the hooks drop a failed answer), the codec's `errors` otherwise."""
    try:
        return text.encode(encoding, errors)
    except (UnicodeError, LookupError):
        return b""


class HookServer(SocketServer):
    """Answers the hooks on the home's socket, on daemon threads of its own."""

    def __init__(self, home: Home, log: Any, environ: Mapping[str, str] | None = None) -> None:
        super().__init__(Path(hookwire.socket_path(str(home.root))), log, name="hooks", max_clients=MAX_CLIENTS)
        self.home = home
        self.environ = os.environ if environ is None else environ
        self.stamp = hookwire.code_stamp()  # at start: code installed since then is another version
        self._thread: threading.Thread | None = None
        self._pause = float(self.environ.get(PAUSE_ENV) or 0)
        self._stall = float(self.environ.get(STALL_ENV) or 0)
        self._slack = hookwire.slack(dict(self.environ))  # tests: the client's slack too (the same environment)
        self._spare: list[Any] = []  # `memd.agent.hooks.Kept` sets not lent now
        self._spare_lock = threading.Condition()  # notified when a set is given back
        self._preparing = 0  # sets lent to a SessionStart's `prepare` (after its answer)
        self._wanted = 0  # answers waiting for one of those

    def start(self) -> None:
        """Load the hooks' modules and listen, on a thread (the daemon's start does not wait)."""
        self._thread = threading.Thread(target=self._run, name="memd-hooks", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import importlib  # noqa: PLC0415 - the daemon's thread, not a hook's path

        try:
            for name in WARM:
                importlib.import_module(name)
        except Exception as exc:  # a broken install: the hooks answer themselves (and say what is wrong)
            self.log.warning("hooks.not_served", reason=f"{type(exc).__name__}: {exc}"[:300])
            return
        self._warm_model()
        if self._stopped.is_set():
            return
        listener = self._listen()
        if listener is None:
            return
        self.log.info("hooks.serving", path=str(self.path))
        self._accept_loop(listener)

    def settings_changed(self) -> None:
        """After a reload (SIGHUP): a provider that now calls a model gets its SDK loaded, off the main loop. The
        answers themselves read `settings.json` each time."""
        threading.Thread(target=self._warm_model, name="memd-hooks-warm", daemon=True).start()

    def _warm_model(self) -> None:
        """With a model provider, load its SDK now: a recall's budget counts from the hook's start, and the
        SDK's first import takes most of it (the hook process pays it each time)."""
        from memd import settings as st  # noqa: PLC0415 - the daemon's thread, not a hook's path

        try:
            provider, _why = st.effective_provider(st.load(self.home.settings_file), memd_dir=self.home.memd_dir)
            if provider == "anthropic":
                import anthropic  # noqa: F401, PLC0415 - the SDK memd.llm.client loads at its first call

                import memd.llm.client  # noqa: F401, PLC0415

                self.log.info("hooks.model_ready", provider=provider)
        except Exception as exc:  # the first recall loads it then
            self.log.warning("hooks.warm_failed", reason=str(exc)[:300])

    def _serve_one(self, conn: socket.socket) -> None:
        try:
            with conn:
                if not self._same_user(conn):
                    return
                if self._stall:
                    time.sleep(self._stall)
                conn.settimeout(READ_TIMEOUT_S)
                self._serve(conn, read_request(conn))
        except (OSError, ValueError):
            pass  # a malformed request, or the hook gave up (its deadline): nothing to tell it
        except Exception as exc:
            self.log.warning("hooks.failed", reason=f"{type(exc).__name__}: {exc}"[:300])
        finally:
            self._slots.release()

    @staticmethod
    def _same_user(conn: socket.socket) -> bool:
        cred = getattr(socket, "SO_PEERCRED", None)
        if cred is None:
            return True  # the 0700 directory and the 0600 socket keep others out
        _pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, cred, struct.calcsize("3i")))
        return uid == os.getuid()

    def _serve(self, conn: socket.socket, req: Request) -> None:
        home, why = self._home_of(req)
        wait, settings = (why or "another home", None) if home is None else self._wait(req, home)
        if isinstance(wait, str) or home is None:
            conn.sendall(b"no " + str(wait).encode()[:200] + b"\n")  # harmless to a hook that gave up
            return
        if time.monotonic() > req.sent + hookwire.ACK_WAIT_S + self._slack:
            self.log.info("hooks.late", sub=req.sub)  # it has answered itself by now: nothing is done for it
            return
        due = time.monotonic() + wait
        conn.sendall(b"ok %d\n" % int(wait * 1000))
        if self._pause:
            self.log.info("hooks.paused", seconds=self._pause)
            time.sleep(self._pause)
        if time.monotonic() > due - START_MARGIN_S:
            self.log.warning("hooks.abandoned", sub=req.sub, reason="started too late: the hook answers itself")
            return
        kept = self._lend()
        ready = False  # a SessionStart's answer taken: the session's prompts come next
        try:
            ready = self._answer(conn, req, home, due, kept, settings) and req.sub == "context"
        finally:
            if not ready:
                self._give_back(kept)
        if ready:
            self._prepare(kept, home, req)

    def _prepare(self, kept: Any, home: Home, req: Request) -> None:
        """After a SessionStart's answer: its project's scope for recall made ready in `kept`
        (`memd.agent.hooks.prepare`), then `kept` given back. An answer that wants a set meanwhile waits for this
        one (`_lend`), and the preparing stops at its next step."""
        from memd.agent.hooks import prepare  # noqa: PLC0415 - loaded by _run already

        with self._spare_lock:
            self._preparing += 1
        try:
            prepare(kept, home, req.stdin, req.cwd, stop=lambda: self._wanted > 0)
        finally:
            self._give_back(kept, prepared=True)

    def _answer(self, conn: socket.socket, req: Request, home: Home, due: float, kept: Any, settings: Any) -> bool:
        """The work once the hook was told "ok": the answer, then (once taken) its records, on `kept`; a recall
        with the `settings` `_wait` read for it. Whether the hook took it."""
        from memd.agent.hooks import respond  # noqa: PLC0415 - loaded by _run already

        started = min(process_started(pid=req.pid), req.sent)
        reply = respond(req.sub, home, req.stdin, cwd=req.cwd, env=req.env, started=started, kept=kept, settings=settings)
        out = encode(reply.out, req.streams[0], req.streams[1])
        err = encode(reply.err, req.streams[2], req.streams[3]) or encode(reply.err, req.streams[2], "backslashreplace")
        if time.monotonic() > due:
            self.log.warning("hooks.abandoned", sub=req.sub, reason="answered too late: the hook answers itself")
            return False
        conn.sendall(b"%d %d %d\n" % (reply.code, len(out), len(err)) + out + err)
        if not self._taken(conn):
            self.log.warning("hooks.abandoned", sub=req.sub, reason="the hook did not take the answer: it answers itself")
            return False
        from memd.agent.hooks import write_records  # noqa: PLC0415 - loaded by _run already

        write_records(home, reply.records, kept)  # only now: a hook that gave up records what it answered itself
        try:
            conn.sendall(b"r\n")  # written: the hook process ends with its records there, as when it answers itself
        except OSError:
            pass
        self.log.debug("hooks.answered", sub=req.sub, bytes=len(out), ms=round((time.monotonic() - req.sent) * 1000, 1))
        return True

    def _lend(self) -> Any:
        """A set of kept connections no other answer uses now: a spare one; else the one a SessionStart's
        `_prepare` holds (made ready for this prompt, most likely), waited for `PREPARED_WAIT_S` at most while the
        preparing stops at its next step; else a new one."""
        with self._spare_lock:
            if not self._spare and self._preparing:  # the set a SessionStart is making ready: this answer's
                self._wanted += 1  # (its `prepare` stops at its next step)
                self._spare_lock.wait_for(lambda: bool(self._spare), PREPARED_WAIT_S)
                self._wanted -= 1
            if self._spare:
                return self._spare.pop()
        from memd.agent.hooks import Kept  # noqa: PLC0415 - loaded by _run already

        return Kept(self.home)

    def _give_back(self, kept: Any, prepared: bool = False) -> None:
        """`kept` (lent by `_lend`) free for the next answer; `prepared`: by `_prepare`, which counted it."""
        kept.done()
        with self._spare_lock:
            self._preparing -= prepared
            if not self._stopped.is_set():
                self._spare.append(kept)
                self._spare_lock.notify()
                return
        kept.close()

    def _taken(self, conn: socket.socket) -> bool:
        """Whether the hook took the answer (its `hookwire.TAKEN` line, sent on reading it whole)."""
        try:
            conn.settimeout(TAKEN_WAIT_S + self._slack)  # tests: the client waits that much longer for "r" too
            return conn.recv(len(hookwire.TAKEN)) == hookwire.TAKEN
        except OSError:
            return False

    def _home_of(self, req: Request) -> tuple[Home | None, str | None]:
        """The hook's home as its process names it, when it is this daemon's; else why not."""
        if req.protocol != str(hookwire.PROTOCOL).encode() or req.stamp != self.stamp:
            return None, "another version of memd"
        if req.sub not in hookwire.SUBS:
            return None, f"{req.sub}: not answered here"
        for name in SAME_ENV:
            if req.env.get(name) != self.environ.get(name):
                return None, f"another environment ({name})"
        root = resolve_home(req.home, environ=req.env, cwd=req.cwd)
        try:
            if not os.path.samefile(root, self.home.root):
                return None, "another home"
        except OSError:
            return None, "another home"
        return Home(root), None

    def _wait(self, req: Request, home: Home) -> tuple[float | str, Any]:
        """How long the hook may wait for this answer, or why the daemon does not give it; and a recall's settings,
        read to decide it (the answer uses them: not read twice)."""
        if req.sub != "recall":
            return ANSWER_WAIT_S + self._slack, None
        from memd import settings as st  # noqa: PLC0415 - loaded by _run already

        settings = st.load(home.settings_file)
        provider, _why = st.effective_provider(settings, env=req.env, memd_dir=home.memd_dir)
        if provider == "offline":
            return ANSWER_WAIT_S + self._slack, settings
        if provider == "claude-code":
            return "the claude-code provider runs in the hook's own environment", None
        names = {*MODEL_ENV, *(k for k in (*req.env, *self.environ) if k.startswith(hookwire.ENV_PREFIX))}
        differ = sorted(n for n in names if req.env.get(n) != self.environ.get(n))
        if differ:
            return f"another environment ({differ[0]})", None
        budget_end = min(process_started(pid=req.pid), req.sent) + settings.memd.recall_budget_ms / 1000
        return max(ANSWER_WAIT_S, budget_end - time.monotonic() + MODEL_GRACE_S) + self._slack, settings

    def stop(self) -> None:
        """Close the socket and remove its file (ours: made by `_listen`), and the kept connections not lent now
        (those lent are closed when their answer ends)."""
        self._close()
        with self._spare_lock:
            spare, self._spare = self._spare, []
        for kept in spare:
            kept.close()


__all__ = ["ANSWER_WAIT_S", "MAX_CLIENTS", "HookServer", "Request", "encode", "read_request"]
