"""The hook socket's wire, and its client: a running daemon answers the agent hooks (issue 27 point 3).

A hook process pays the interpreter's start, then the standard library and memd's modules its work
needs (about 4 × the bare interpreter, bench/RESULTS.md) before it does anything. `memd run` has them
loaded: it serves `memd context --hook` and `memd recall --hook` on `<home>/memd/hook.sock`
(memd/daemon/hook_server.py), running the same code the hook process runs (`memd.agent.hooks.respond`),
so the answer is the one the process would print, and records what the process would record. The
client here is what the `memd` script (`memd.__main__`) tries first; it imports nothing beyond `os`,
`sys`, `time` and `_socket` (no `socket`: its `enum` costs more than the rest of the client).

One connection, one request, all lengths in bytes:

    → b"<header length>:<stdin length>\\n" header stdin
      header: fields joined by NUL — MAGIC, PROTOCOL, the code stamp, the sub-command, the `--home`
      value ("" for none), the cwd, the client's pid, when it sent this (its `time.monotonic()`: the
      clock is the machine's, so the daemon reads it too), stdout's and stderr's encoding and errors,
      then `NAME=value` for each variable of the environment that decides an answer (`wanted_env`)
    ← b"ok <milliseconds>\\n"   the daemon took it and answers within that time, counted from now
      or b"no <reason>\\n"      it does not (another home, another environment or version): the hook
                                 answers itself at once
    ← b"<exit code> <stdout length> <stderr length>\\n" stdout stderr   the hook's answer, bytes to write
    → b"k\\n"                   the hook has it whole: only now does the daemon write the records the hook
                                 would have written (a hook that gave up answers, and records, itself)
    ← b"r\\n"                   they are written (the hook waits `RECORDED_WAIT_S` at most for it)

Invariants: the client never raises and never waits past its deadlines — `ACK_WAIT_S` from its send to
the "ok", then the time the daemon named; on anything else (no socket, refused, not ours, late, cut,
malformed, "no") `ask` returns None and the hook answers in-process, as without a daemon. The socket is
used only when it is a socket owned by this user, in a directory of this user's that no one else may
write (a symlink in its place is never followed). `MEMD_HOOK_SOCKET=off` makes every hook answer itself.
"""

from __future__ import annotations

import os
import sys
import time

MAGIC = b"memd-hook"
PROTOCOL = 2  # both sides must agree; a change of the wire or of what a request carries changes it
SOCKET_NAME = "hook.sock"
RECORDED_WAIT_S = 0.5  # after the answer: for the daemon's "records written" line, at most (the answer stands)
TAKEN = b"k\n"  # the hook's last line: it has the whole answer (the daemon then writes the hook's records)
OFF_ENV = "MEMD_HOOK_SOCKET"  # "off": every hook answers itself (tests, measurements)
ACK_WAIT_S = 0.3  # from the send to the daemon's "ok": longer, and the hook answers itself
SLACK_ENV = "MEMD_TEST_HOOK_SLACK_S"  # tests only: seconds added to the socket's waits, both sides (a loaded CI machine)


def slack(environ: dict[str, str] | os._Environ[str] | None = None) -> float:
    """The test suite's extra wait (`SLACK_ENV`), 0 for everyone else."""
    try:
        return max(0.0, float((os.environ if environ is None else environ).get(SLACK_ENV) or 0))
    except ValueError:
        return 0.0
MAX_HEADER = 64 * 1024
MAX_STDIN = 4 * 1024 * 1024  # memd.agent.hooks.MAX_STDIN (a test holds them equal)
MAX_ANSWER = 1024 * 1024
SUBS = frozenset({"context", "recall"})  # PreCompact starts a job and waits for it: it answers itself
# The environment a hook's answer depends on, besides the home and the cwd: `~` and the local date
# (HOME, TZ), the home (DEEPCODE_HOME), and for a recall that may call a model, the provider's choice
# and its client (ANTHROPIC_*, PATH for `claude`, proxies, certificates).
ENV_NAMES = frozenset({
    "HOME", "TZ", "DEEPCODE_HOME", "PATH", "SSL_CERT_FILE", "SSL_CERT_DIR",
    "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy", "no_proxy",
})  # fmt: skip
ENV_PREFIX = "ANTHROPIC_"


def wanted_env(environ: dict[str, str] | os._Environ[str]) -> dict[str, str]:
    """The variables of `environ` a hook's answer may depend on (`ENV_NAMES`, `ENV_PREFIX`)."""
    return {k: v for k, v in environ.items() if k in ENV_NAMES or k.startswith(ENV_PREFIX)}


def code_stamp() -> bytes:
    """The installed code's identity: memd's version and when its hook module was written (an upgrade
    rewrites it). A daemon started before an upgrade has another stamp and is not asked."""
    from memd import __version__  # noqa: PLC0415 - start-up: memd is loaded already

    here = os.path.dirname(os.path.abspath(__file__))
    try:
        st = os.stat(os.path.join(here, "hooks.py"))
    except OSError:
        return b""
    return f"{__version__}/{st.st_mtime_ns}/{st.st_size}".encode()


def socket_path(home: str | None) -> str:
    """The hook socket of the home `memd --home <home>` names (as `memd.tree.resolve_home`, relative to the
    cwd when relative)."""
    root = home or os.environ.get("DEEPCODE_HOME") or "~/.deepcode"
    return os.path.join(os.path.expanduser(root), "memd", SOCKET_NAME)


def usable(path: str) -> bool:
    """Whether `path` is a socket owned by this user in a directory of this user's that only they may
    write: nothing else is connected to (a link in the socket's or the directory's place included)."""
    import stat  # noqa: PLC0415 - start-up: loaded at the interpreter's start already

    uid = os.getuid()
    try:
        sock, folder = os.lstat(path), os.lstat(os.path.dirname(path) or ".")
    except OSError:
        return False
    return (stat.S_ISSOCK(sock.st_mode) and sock.st_uid == uid and stat.S_ISDIR(folder.st_mode)
            and folder.st_uid == uid and not folder.st_mode & 0o022)  # fmt: skip


def encode_request(sub: str, home: str | None, stdin: bytes, *, cwd: str, pid: int, sent: float,
                   streams: tuple[str, str, str, str], env: dict[str, str], stamp: bytes) -> bytes:  # fmt: skip
    """One request (the module's docstring). Raises ValueError for a NUL in a field (no such path exists)."""
    fields = [MAGIC, str(PROTOCOL).encode(), stamp, sub.encode(), os.fsencode(home or ""), os.fsencode(cwd),
              str(pid).encode(), repr(sent).encode(), *(s.encode() for s in streams),
              *(os.fsencode(k) + b"=" + os.fsencode(v) for k, v in sorted(env.items()))]  # fmt: skip
    if any(b"\0" in f for f in fields):
        raise ValueError("a NUL in a request field")
    header = b"\0".join(fields)
    return b"%d:%d\n" % (len(header), len(stdin)) + header + stdin


def _recv_line(sock: object, buf: bytearray, due: float, limit: int) -> bytes | None:
    """The next line (without its newline) by `due`, on `time.monotonic()`'s clock; None when late, cut or long."""
    while b"\n" not in buf:
        left = due - time.monotonic()
        if left <= 0 or len(buf) > limit:
            return None
        sock.settimeout(left)  # type: ignore[attr-defined]
        chunk = sock.recv(65536)  # type: ignore[attr-defined]
        if not chunk:
            return None
        buf += chunk
    line, _, rest = bytes(buf).partition(b"\n")
    buf[:] = rest
    return line


def _recv_exactly(sock: object, buf: bytearray, n: int, due: float) -> bytes | None:
    while len(buf) < n:
        left = due - time.monotonic()
        if left <= 0:
            return None
        sock.settimeout(left)  # type: ignore[attr-defined]
        chunk = sock.recv(max(65536, n - len(buf)))  # type: ignore[attr-defined]
        if not chunk:
            return None
        buf += chunk
    return bytes(buf[:n])


def decode_answer(line: bytes) -> tuple[int, int, int] | None:
    """(exit code, stdout length, stderr length) of an answer's first line, or None."""
    parts = line.split(b" ")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        return None
    code, n_out, n_err = (int(p) for p in parts)
    return (code, n_out, n_err) if code < 256 and n_out + n_err <= MAX_ANSWER else None


def ask(sub: str, home: str | None, stdin: bytes, path: str | None = None) -> tuple[int, bytes, bytes] | None:
    """The daemon's answer to the hook `sub` on `home` with `stdin`: (exit code, stdout, stderr), or None when
    the hook must answer itself (the module's docstring says when). Never raises."""
    try:
        path = path or socket_path(home)
        if sub not in SUBS or os.environ.get(OFF_ENV) == "off" or not usable(path):
            return None
        import _socket  # noqa: PLC0415 - start-up: `socket` loads enum

        streams = (sys.stdout.encoding, sys.stdout.errors or "strict", sys.stderr.encoding,
                   sys.stderr.errors or "strict")  # fmt: skip
        sent = time.monotonic()
        request = encode_request(sub, home, stdin, cwd=os.getcwd(), pid=os.getpid(), sent=sent, streams=streams,
                                 env=wanted_env(os.environ), stamp=code_stamp())  # fmt: skip
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            ack_wait = ACK_WAIT_S + slack()
            sock.settimeout(ack_wait)
            sock.connect(path)
            sock.sendall(request)
            buf = bytearray()
            ack = _recv_line(sock, buf, sent + ack_wait, 256)
            if ack is None or not ack.startswith(b"ok ") or not ack[3:].isdigit():
                return None
            due = time.monotonic() + int(ack[3:]) / 1000
            head = _recv_line(sock, buf, due, 256)
            lengths = decode_answer(head) if head is not None else None
            if lengths is None:
                return None
            body = _recv_exactly(sock, buf, lengths[1] + lengths[2], due)
            if body is None:
                return None
            try:
                sock.sendall(TAKEN)  # the daemon writes its records only now: had we given up, we would record them
                # ... and says when they are written, so they are there when this process ends, as in-process
                _recv_line(sock, buf, min(due, time.monotonic() + RECORDED_WAIT_S + slack()), 16)
            except OSError:
                pass
            return lengths[0], body[: lengths[1]], body[lengths[1] :]
        finally:
            sock.close()
    except Exception:  # refused, reset, timed out, closed: the hook answers itself
        return None


__all__ = ["ACK_WAIT_S", "MAGIC", "OFF_ENV", "PROTOCOL", "SLACK_ENV", "SOCKET_NAME", "SUBS", "TAKEN", "ask",
           "code_stamp", "decode_answer", "encode_request", "slack", "socket_path", "usable", "wanted_env"]  # fmt: skip
