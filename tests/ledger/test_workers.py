"""`memd.ledger.workers`: forked workers that share the parent's objects, do each job once, and leave
no child behind whatever happens."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import orjson
import pytest

from memd.ledger import workers


def _gone(pid: int) -> bool:
    """The child was reaped (it is no child of ours any more)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def _pids(log: Path) -> set[int]:
    return {int(x) for x in log.read_text().split()} if log.exists() else set()


def _logging_work(log: Path, body: object) -> object:
    def work(n: int) -> object:
        with open(log, "a") as fh:
            fh.write(f"{os.getpid()}\n")
        return body(n)  # type: ignore[operator]

    return work


def test_every_job_once_with_what_the_parent_held(tmp_path: Path) -> None:
    """More jobs than one atomic write of numbers holds (1,500 × 4 bytes): each is done once, by
    children that read the parent's objects as they were at the fork (a lock pickles not at all)."""
    held = {"lock": threading.Lock(), "base": 7}
    log = tmp_path / "pids"
    work = _logging_work(log, lambda n: [n, n * held["base"], held["lock"].locked()])
    got = dict(workers.run(1_500, 3, work, orjson.dumps, orjson.loads))
    assert got == {n: [n, n * 7, False] for n in range(1_500)}
    pids = _pids(log)
    assert 1 <= len(pids) <= 3 and os.getpid() not in pids
    assert all(_gone(p) for p in pids)


def test_a_workers_error_is_raised_in_the_parent_and_no_child_is_left(tmp_path: Path) -> None:
    log = tmp_path / "pids"

    def body(n: int) -> int:
        if n == 5:
            raise FileNotFoundError(2, "gone", "/x/y.jsonl")
        return n

    with pytest.raises(FileNotFoundError) as err:
        list(workers.run(40, 2, _logging_work(log, body), orjson.dumps, orjson.loads))
    assert err.value.filename == "/x/y.jsonl"
    assert all(_gone(p) for p in _pids(log))


def test_an_error_that_does_not_pickle_comes_as_one_line(tmp_path: Path) -> None:
    class Odd(Exception):
        def __reduce__(self) -> object:
            raise TypeError("no")

    def body(n: int) -> int:
        raise Odd("strange")

    with pytest.raises(RuntimeError, match="scan worker: Odd: strange"):
        list(workers.run(3, 2, body, orjson.dumps, orjson.loads))


def test_a_worker_that_dies_is_reported(tmp_path: Path) -> None:
    log = tmp_path / "pids"

    def body(n: int) -> int:
        if n == 2:
            os._exit(9)  # killed mid-job: its result never comes
        return n

    with pytest.raises(workers.WorkerDied, match="not done"):
        list(workers.run(6, 2, _logging_work(log, body), orjson.dumps, orjson.loads))
    assert all(_gone(p) for p in _pids(log))


def test_a_consumer_that_stops_early_leaves_no_child(tmp_path: Path) -> None:
    log = tmp_path / "pids"
    run = workers.run(50, 2, _logging_work(log, lambda n: n), orjson.dumps, orjson.loads)
    first = next(run)
    run.close()  # the consumer stopped: the rest is not waited for
    assert first[0] in range(50)
    assert all(_gone(p) for p in _pids(log))


def test_big_results_cross_the_pipe_whole(tmp_path: Path) -> None:
    """A result larger than a pipe's buffer arrives whole, while other children write theirs."""
    got = dict(workers.run(6, 2, lambda n: "x" * (200_000 + n), orjson.dumps, orjson.loads))
    assert {n: len(v) for n, v in got.items()} == {n: 200_000 + n for n in range(6)}


def test_meanwhile_runs_once_in_the_parent_while_the_children_work(tmp_path: Path) -> None:
    """`meanwhile` runs in the parent once every job number is handed out: before any result is read
    (no child can answer before it has a job)."""
    calls: list[tuple[int, int]] = []
    got: list[int] = []
    run = workers.run(30, 2, lambda n: n, orjson.dumps, orjson.loads,
                      meanwhile=lambda: calls.append((os.getpid(), len(got))))  # fmt: skip
    for n, _ in run:
        got.append(n)
    assert calls == [(os.getpid(), 0)] and sorted(got) == list(range(30))


def test_turns_keep_the_childrens_held_sections_apart(tmp_path: Path) -> None:
    """What a child does `with turns():` never interleaves with another child's: each "in" is
    followed by its own "out" (the pause inside only gives an overlap every chance to show)."""
    turns = workers.Turns()
    log = tmp_path / "log"

    def body(n: int) -> int:
        with turns():
            with open(log, "a") as fh:
                fh.write(f"in {n}\n")
            time.sleep(0.002)
            with open(log, "a") as fh:
                fh.write(f"out {n}\n")
        return n

    try:
        assert sorted(n for n, _ in workers.run(40, 3, body, orjson.dumps, orjson.loads)) == list(range(40))
    finally:
        turns.close()
    lines = log.read_text().split("\n")[:-1]
    assert len(lines) == 80
    for enter, leave in zip(lines[::2], lines[1::2]):
        assert enter.split()[0] == "in" and leave == f"out {enter.split()[1]}"


def test_a_token_lost_with_its_holder_is_waited_for_once_then_made_again(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """A child that dies holding the token does not stop the others: the next waits `WAIT_S`, goes on
    (SQLite's own locks still keep the writes apart) and puts a token back, so no later write waits
    again (the reviewer's run: every later batch of every child waited the full 5 s)."""
    monkeypatch.setattr(workers.Turns, "WAIT_S", 0.05)
    turns = workers.Turns()

    def body(n: int) -> int:
        if n == 0:
            with turns():
                os._exit(0)  # dies holding it
        return n

    try:
        with pytest.raises(workers.WorkerDied):
            list(workers.run(1, 1, body, orjson.dumps, orjson.loads))
        with turns():  # the token never came back: held without it, then made again
            pass
        assert turns._take()  # at once
    finally:
        turns.close()
