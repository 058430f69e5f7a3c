"""Forked worker processes for a big first read, without `multiprocessing`.

`run(jobs, workers, work, encode, decode, meanwhile)` forks `workers` children and yields
`(n, decode(encode(work(n))))` for every job number `n` in `range(jobs)`, in the order they finish. The children share all the parent
held when they were forked (the sessions to read, the modules imported): nothing goes to them but
job numbers, 4 bytes each on one pipe they all read, and a pipe read or write of at most PIPE_BUF
bytes is atomic, so no two children take the same job; each sends its results back on a pipe of
its own, `encode`d and length-prefixed. `multiprocessing.Pool` did the same work with 40–80 ms more
before the first session was read (its imports, three threads, the jobs pickled) — time in which the
parent is alone on the machine.

Invariants: every job is done once, or `run` raises (a child's exception is raised again in the
parent; a child that ends without its job's result is `WorkerDied`). When `run` returns or raises,
or its consumer stops early, no child is left running: each is killed if need be and reaped. A
child never runs the parent's clean-up (`os._exit`): it leaves the parent's open files, SQLite
connection and unflushed output alone.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

_JOB = 4  # bytes of a job number on the jobs pipe
_PIPE_BUF = 4096  # POSIX's minimum for an atomic pipe write (Linux's PIPE_BUF)
_HEADER = 9  # a message: 1 byte kind, 8 bytes length, then the payload
_RESULT, _ERROR = 0, 1


class Turns:
    """One token on a pipe, made before the fork: `with turns():` in a child waits for it, so the
    children's write transactions follow each other at once, where SQLite's busy handler would have
    the second wait by polling (1, 2, 5, 10, 15 … ms). Advisory only: SQLite's own locks keep the
    writes apart, so a child that has waited `WAIT_S` (the holder died with the token) goes on without it
    and puts a token back when it is done: the turns go on for everyone after one wait, where each later
    write of every child would have waited `WAIT_S` again (a spare token, should the holder have been
    only slow, costs nothing but the ordering)."""

    WAIT_S = 5.0

    def __init__(self) -> None:
        self.r, self.w = os.pipe()
        os.set_blocking(self.r, False)
        os.write(self.w, b"t")

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        self._take()
        try:
            yield
        finally:
            os.write(self.w, b"t")  # the one taken, or one in place of a token lost with its holder

    def _take(self) -> bool:
        poll = select.poll()
        poll.register(self.r, select.POLLIN)
        deadline = time.monotonic() + self.WAIT_S
        while True:
            try:
                if os.read(self.r, 1):
                    return True
            except BlockingIOError:  # another child took it first
                pass
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            poll.poll(left * 1000)

    def close(self) -> None:
        for fd in (self.r, self.w):
            try:
                os.close(fd)
            except OSError:
                pass


class WorkerDied(RuntimeError):
    """A worker process ended without sending back the result of the job it had taken."""


def run(jobs: int, workers: int, work: Callable[[int], Any], encode: Callable[[Any], bytes],
        decode: Callable[[bytes], Any], meanwhile: Callable[[], None] | None = None) -> Iterator[tuple[int, Any]]:  # fmt: skip
    """`(n, result)` for each job `n` in `range(jobs)` as the `workers` children finish them;
    `meanwhile()` runs in the parent once every job number is handed out (the children are busy)."""
    crew = _Crew()
    try:
        r_jobs, crew.w_jobs = os.pipe()
        crew.fds.append(r_jobs)
        for _ in range(workers):
            r_out, w_out = os.pipe()
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child; its coverage is not collected
                _child(r_jobs, crew.w_jobs, w_out, work, encode)
            os.close(w_out)
            crew.pids.append(pid)
            crew.outs.append(r_out)
        yield from crew.serve(jobs, decode, meanwhile)
        crew.reap(kill=False)
    finally:
        crew.close()
        crew.reap(kill=True)


class _Crew:
    """The parent's side: the children's pids and the pipe ends it holds (each closed once)."""

    def __init__(self) -> None:
        self.pids: list[int] = []
        self.outs: list[int] = []  # read ends of the children's result pipes
        self.fds: list[int] = []  # other ends to close at the end
        self.w_jobs = -1

    def serve(self, jobs: int, decode: Callable[[bytes], Any], meanwhile: Callable[[], None] | None) -> Iterator[tuple[int, Any]]:
        """Hand out the job numbers and read the children's messages until every child has closed its pipe."""
        todo = b"".join(n.to_bytes(_JOB, "little") for n in range(jobs))
        per_write = _PIPE_BUF - _PIPE_BUF % _JOB
        bufs = {fd: bytearray() for fd in self.outs}
        done = 0
        poll = select.poll()  # not select.select: no limit on the descriptors' numbers
        for fd in self.outs:
            poll.register(fd, select.POLLIN)
        poll.register(self.w_jobs, select.POLLOUT)
        reading = len(self.outs)
        while reading:
            for fd, _event in poll.poll():
                if fd == self.w_jobs:  # a free page: a write of at most PIPE_BUF bytes neither blocks nor splits
                    os.write(fd, todo[:per_write])
                    todo = todo[per_write:]
                    if not todo:
                        poll.unregister(fd)
                        self.close_jobs()  # the children see the end once the pipe is empty
                        if meanwhile is not None:
                            meanwhile()
                    continue
                data = os.read(fd, 1 << 16)
                if not data:  # the child closed its end: it has left
                    poll.unregister(fd)
                    reading -= 1
                    continue
                buf = bufs[fd]
                buf += data
                while len(buf) >= _HEADER:
                    size = int.from_bytes(buf[1:_HEADER], "little")
                    if len(buf) < _HEADER + size:
                        break
                    kind, payload = buf[0], bytes(buf[_HEADER : _HEADER + size])
                    del buf[: _HEADER + size]
                    if kind == _ERROR:
                        import pickle  # noqa: PLC0415 - start-up: only when a worker failed

                        raise pickle.loads(payload)
                    done += 1
                    yield int.from_bytes(payload[:_JOB], "little"), decode(payload[_JOB:])
        if done < jobs:
            raise WorkerDied(f"{jobs - done} of {jobs} batches of the scan were not done: a worker process ended early")

    def close_jobs(self) -> None:
        if self.w_jobs >= 0:
            os.close(self.w_jobs)
            self.w_jobs = -1

    def close(self) -> None:
        self.close_jobs()
        for fd in (*self.fds, *self.outs):
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds, self.outs = [], []

    def reap(self, kill: bool) -> None:
        """Wait for the children (killed first with `kill`); each is reaped once."""
        pids, self.pids = self.pids, []
        for pid in pids:
            if kill:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


def _child(r_jobs: int, w_jobs: int, w_out: int, work: Callable[[int], Any],
           encode: Callable[[Any], bytes]) -> None:  # pragma: no cover - runs in the forked child  # fmt: skip
    """Take job numbers until the pipe is empty, send each result back, and leave without the parent's clean-up."""
    code = 0
    try:
        os.close(w_jobs)
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # ^C ends the child at once; the parent reports it
        while True:
            rec = os.read(r_jobs, _JOB)
            if not rec:
                break
            payload = rec + encode(work(int.from_bytes(rec, "little")))
            _send(w_out, _RESULT, payload)
    except BaseException as exc:
        code = 1
        try:
            import pickle  # noqa: PLC0415 - start-up: only when the work failed

            try:
                data = pickle.dumps(exc)
            except Exception:
                data = pickle.dumps(RuntimeError(f"scan worker: {type(exc).__name__}: {exc}"))
            _send(w_out, _ERROR, data)
        except BaseException:
            pass
    finally:
        os._exit(code)


def _send(fd: int, kind: int, payload: bytes) -> None:
    data = memoryview(bytes([kind]) + len(payload).to_bytes(8, "little") + payload)
    while data:
        data = data[os.write(fd, data) :]
