"""FTS5 search against real SQLite and real files; refresh of MEMORY.md and the drawer render."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import stat
import subprocess
import sys
import textwrap
import threading
import time
from datetime import date
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from memd.discovery import list_memory_dirs
from memd.index.query import SPACELESS, sentence_pieces
from memd.index.refresh import refresh_all, refresh_dir
from memd.index.search import ZWSP, open_readonly, query_index, segment
from memd.index.writer import SearchIndex
from memd.memory.file import Memory, parse_memory, render_memory, write_memory
from memd.memory.scan import scan_dir
from memd.tree import Home

REPO = Path(__file__).resolve().parents[2]
PROJECT = "-work-app"
OTHER = "-work-other"


def put(directory: Path, name: str, kind: str, description: str, body: str) -> Path:
    return write_memory(directory, name, render_memory(name, description, kind, body))


@pytest.fixture
def home(tmp_path: Path) -> Home:
    h = Home(tmp_path / "home")
    g, p, o = h.global_memory, h.project_memory(PROJECT), h.project_memory(OTHER)
    put(g, "prefers-tabs", "feedback", "the user indents with tabs", "New files use tabs too. Why: diffs.")
    put(g, "memory-design", "user", "长期记忆系统", "用户在做长期记忆系统的设计，喜欢简洁的方案。")
    put(g, "japanese", "user", "日本語のメモ", "長期メモリの設計について。")
    put(p, "deploy-process", "project", "how releases reach production", "Run make deploy; never deploy on Fridays.")
    put(p, "cpp-style", "project", "C++ conventions", "Use c++ templates sparingly; prefer unbalanced trees? no.")
    put(p, "mixed-script", "project", "混合文本", "我们用Python写脚本，部署到Kubernetes集群。")
    put(o, "other-secret", "project", "deploy notes of another project", "deploy with terraform")
    return h


@pytest.fixture
def index(home: Home) -> SearchIndex:
    refresh_all(home, today=date(2024, 5, 12))
    idx = SearchIndex.for_home(home)
    yield idx
    idx.close()


def names(hits: list) -> list[str]:
    return [h.name for h in hits]


# --------------------------------------------------------------------------- queries


def test_english_prefix_query(index: SearchIndex) -> None:
    hits = index.search("deplo*", project_key=PROJECT)
    assert names(hits) == ["deploy-process"]
    assert hits[0].file == f"projects/{PROJECT}/memory/deploy-process.md"
    assert hits[0].scope == "project" and hits[0].project_key == PROJECT
    assert "**deploy**" in hits[0].snippet


def test_whole_word_matches_first_and_prefix_only_as_a_fallback(index: SearchIndex) -> None:
    assert index.search('"depl"', project_key=PROJECT) == []  # explicit syntax: no fallback
    fallback = index.search("depl", project_key=PROJECT)  # plain word, nothing whole: retried as depl*
    assert fallback and fallback == index.search("depl*", project_key=PROJECT)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("记忆", ["memory-design"]),  # two characters inside 长期记忆系统的设计
        ("记", ["memory-design"]),  # a single character
        ("系统的设计", ["memory-design"]),
        ("设计", ["memory-design"]),
        ("メモリ", ["japanese"]),
        ("部署", ["mixed-script"]),
        ("Python", ["mixed-script"]),  # Latin word glued to Chinese text
        ("kubernetes", ["mixed-script"]),
        ("期系", []),  # both characters occur, but not adjacent
    ],
)
def test_cjk_queries(index: SearchIndex, query: str, expected: list[str]) -> None:
    assert names(index.search(query, project_key=PROJECT)) == expected


def test_cjk_snippet_is_highlighted_without_segmentation_marks(index: SearchIndex) -> None:
    [hit] = index.search("记忆", project_key=None)
    assert hit.snippet == "用户在做长期**记忆**系统的设计，喜欢简洁的方案。"
    assert ZWSP not in hit.snippet and ZWSP not in hit.name


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("deploy AND (", ["deploy-process"]),
        ('"unbalanced', ["cpp-style"]),
        ("c++", ["cpp-style"]),
        ("deploy-process", ["deploy-process"]),
        ("nosuchcol:deploy", []),  # a phrase "nosuchcol deploy": no such text
        ("deploy nosuchcol:x", ["deploy-process"]),  # broken, then no AND hit: any word
        ("deploy^", ["deploy-process"]),
        ("(((", []),
        ("", []),
        ("   ", []),
        ("NOT", []),
    ],
)
def test_syntax_error_queries_fall_back_to_plain_terms(index: SearchIndex, query: str, expected: list[str]) -> None:
    assert names(index.search(query, project_key=PROJECT)) == expected


def test_fts_syntax_still_works(index: SearchIndex) -> None:
    assert names(index.search('"never deploy"', project_key=PROJECT)) == ["deploy-process"]
    assert names(index.search("name:tabs", project_key=None)) == ["prefers-tabs"]
    assert set(names(index.search("tabs OR kubernetes", project_key=PROJECT))) == {"prefers-tabs", "mixed-script"}
    assert index.search("tabs AND kubernetes", project_key=PROJECT) == []  # explicit AND is not loosened


def test_natural_language_query_falls_back_to_any_word(index: SearchIndex) -> None:
    hits = index.search("how do we deploy to production", project_key=PROJECT)
    assert names(hits)[0] == "deploy-process"


def test_scope_is_project_plus_global_drawer(index: SearchIndex) -> None:
    assert set(names(index.search("deploy", project_key=PROJECT))) == {"deploy-process"}
    assert names(index.search("deploy", project_key=OTHER)) == ["other-secret"]
    assert index.search("deploy", project_key=None) == []
    assert names(index.search("tabs", project_key=OTHER)) == ["prefers-tabs"]  # drawer everywhere
    assert set(names(index.search("deploy", project_key=None, all_scopes=True))) == {"deploy-process", "other-secret"}


def test_name_outranks_description_outranks_body(home: Home) -> None:
    d = home.project_memory("-rank")
    filler = "alpha beta gamma delta epsilon zeta eta theta iota kappa"
    put(d, "body-hit", "project", "some notes", f"{filler} zebra")
    put(d, "notes-b", "project", "the zebra crossing", filler)
    put(d, "zebra", "project", "some notes", filler)
    with SearchIndex.for_home(home) as idx:
        refresh_dir(home, "project", "-rank", d, index=idx)
        hits = idx.search("zebra", project_key="-rank")
        assert names(hits) == ["zebra", "notes-b", "body-hit"]
        assert hits[0].score > hits[1].score > hits[2].score


def test_limit(index: SearchIndex) -> None:
    assert len(index.search("deploy OR tabs OR kubernetes", project_key=PROJECT, limit=2)) == 2
    assert index.search("deploy", project_key=PROJECT, limit=0) == []


def test_segment_contract() -> None:
    assert segment("长期记忆") == ZWSP.join("长期记忆")
    assert segment("用Python写") == f"用{ZWSP}Python{ZWSP}写"
    assert segment("plain english, 2 words") == "plain english, 2 words"
    assert segment("ที่มา") == f"ที่{ZWSP}ม{ZWSP}า"  # combining marks stay with their base


# --------------------------------------------------------------------------- sync


def _scan(home: Home) -> dict[tuple[str, str | None], list[Memory]]:
    return {(s, k): scan_dir(d, s, k).memories for s, k, d in list_memory_dirs(home)}


def test_incremental_sync(home: Home, index: SearchIndex) -> None:
    total = index.count()
    assert total == 7
    stats = index.sync(_scan(home))
    assert (stats.added, stats.updated, stats.removed, stats.unchanged) == (0, 0, 0, 7)

    tabs = home.global_memory / "prefers-tabs.md"
    st_ = tabs.stat()
    os.utime(tabs, ns=(st_.st_atime_ns, st_.st_mtime_ns + 1_000_000))
    stats = index.sync(_scan(home))
    assert (stats.added, stats.updated, stats.removed, stats.unchanged) == (0, 1, 0, 6)

    put(home.global_memory, "prefers-tabs", "feedback", "the user indents with tabs", "Now about spaceships.")
    (home.project_memory(PROJECT) / "cpp-style.md").unlink()
    put(home.project_memory(PROJECT), "new-one", "reference", "the board", "https://example.invalid/board")
    stats = index.sync(_scan(home))
    assert (stats.added, stats.updated, stats.removed, stats.unchanged) == (1, 1, 1, 5)
    assert names(index.search("spaceships", project_key=None)) == ["prefers-tabs"]
    assert index.search("diffs", project_key=None) == []  # the old body is gone from the index
    assert index.search("templates", project_key=PROJECT) == []


def test_sync_of_one_dir_leaves_other_dirs_alone(home: Home, index: SearchIndex) -> None:
    stats = index.sync({("project", PROJECT): []})
    assert stats.removed == 3
    assert index.count() == 4
    assert names(index.search("deploy", project_key=OTHER)) == ["other-secret"]


def test_refresh_all_prunes_vanished_projects(home: Home, index: SearchIndex) -> None:
    for f in home.project_memory(OTHER).iterdir():
        f.unlink()
    home.project_memory(OTHER).rmdir()
    refresh_all(home, index=index, today=date(2024, 5, 12))
    assert index.search("terraform", project_key=OTHER) == []
    assert index.count() == 6


def test_sync_one_and_remove(home: Home, index: SearchIndex) -> None:
    path = put(home.global_memory, "extra", "user", "likes tea", "Green tea, no sugar.")
    [m] = [m for m in scan_dir(home.global_memory).memories if m.name == "extra"]
    assert index.sync_one(m) == "added"
    assert index.sync_one(m) == "updated"
    assert names(index.search("tea", project_key=None)) == ["extra"]
    assert index.remove("memory/extra.md") is True
    assert index.remove(path) is False
    assert index.search("tea", project_key=None) == []


def test_db_is_private_and_readonly_for_readers(home: Home, index: SearchIndex) -> None:
    assert stat.S_IMODE(home.search_db.stat().st_mode) == 0o600
    conn = open_readonly(home.search_db)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert names(query_index(conn, "记忆", project_key=None)) == ["memory-design"]
        with pytest.raises(sqlite3.OperationalError):
            conn.execute("DELETE FROM memories")
    finally:
        conn.close()


def test_readonly_open_of_missing_db_fails_cleanly(tmp_path: Path) -> None:
    with pytest.raises(sqlite3.OperationalError):
        open_readonly(tmp_path / "none.sqlite").execute("SELECT 1 FROM memories")


def test_schema_mismatch_rebuilds(home: Home, index: SearchIndex) -> None:
    index._conn.execute("PRAGMA user_version = 0")
    index.close()
    with SearchIndex.for_home(home) as fresh:
        assert fresh.count() == 0  # a cache: dropped, then rebuilt by the next sync
        assert fresh.sync(_scan(home)).added == 7
        assert names(fresh.search("deplo*", project_key=PROJECT)) == ["deploy-process"]


def test_corrupt_db_is_replaced(home: Home) -> None:
    home.search_db.parent.mkdir(parents=True)
    home.search_db.write_bytes(b"this is not a database at all" * 200)
    with SearchIndex.for_home(home) as idx:
        assert idx.sync(_scan(home)).added == 7
        assert names(idx.search("记忆", project_key=None)) == ["memory-design"]


# --------------------------------------------------------------------------- concurrency

N_CONCURRENT = 12
KEY_C = "-concurrent"


def _write_state(directory: Path, word: str) -> None:
    for i in range(N_CONCURRENT):
        put(directory, f"m{i:02d}", "project", f"state {word}", f"body {word} number {i}")


def _writer(home: Home, directory: Path, rounds: int) -> None:
    with SearchIndex.for_home(home) as idx:
        for r in range(rounds):
            _write_state(directory, ("alpha", "beta")[r % 2])
            stats = idx.sync({("project", KEY_C): scan_dir(directory, "project", KEY_C).memories})
            assert stats.updated == N_CONCURRENT


def _check_snapshot(conn: sqlite3.Connection) -> str:
    """Both words in one read transaction: exactly one state, wholly."""
    conn.execute("BEGIN")
    try:
        a = query_index(conn, "alpha", project_key=KEY_C, limit=100)
        b = query_index(conn, "beta", project_key=KEY_C, limit=100)
    finally:
        conn.execute("COMMIT")
    counts = (len(a), len(b))
    assert counts in ((N_CONCURRENT, 0), (0, N_CONCURRENT)), counts
    hits = a or b
    word = "alpha" if a else "beta"
    assert all(h.description == f"state {word}" for h in hits)  # table and FTS agree
    return word


def test_concurrent_reader_thread_never_sees_half_a_sync(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    directory = home.project_memory(KEY_C)
    _write_state(directory, "beta")
    refresh_all(home, today=date(2024, 5, 12))
    errors: list[BaseException] = []
    seen: set[str] = set()
    stop = threading.Event()
    reads = 0

    def reader() -> None:
        nonlocal reads
        conn = open_readonly(home.search_db)
        try:
            while not stop.is_set():
                seen.add(_check_snapshot(conn))
                # Separate statements, separate snapshots: each still whole.
                n = len(query_index(conn, "alpha", project_key=KEY_C, limit=100))
                assert n in (0, N_CONCURRENT), n
                reads += 1
        except BaseException as exc:  # surfaced in the main thread
            errors.append(exc)
        finally:
            conn.close()

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        _writer(home, directory, rounds=30)
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert not errors, errors
    assert reads > 20
    assert seen == {"alpha", "beta"}


READER_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    sys.path.insert(0, sys.argv[1])
    from memd.index.search import open_readonly, query_index
    db, key, n, seconds = sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
    conn = open_readonly(db)
    reads, bad, errors, words = 0, [], [], set()
    # At least `seconds`, and on until both states and 20 reads were seen (a starved process on a loaded
    # machine reads slowly; the writer goes on until this process exits), within a hard cap.
    end, cap = time.monotonic() + seconds, time.monotonic() + 120
    while time.monotonic() < cap and (time.monotonic() < end or reads <= 20 or len(words) < 2):
        try:
            conn.execute("BEGIN")
            a = query_index(conn, "alpha", project_key=key, limit=100)
            b = query_index(conn, "beta", project_key=key, limit=100)
            conn.execute("COMMIT")
            if (len(a), len(b)) not in ((n, 0), (0, n)):
                bad.append([len(a), len(b)])
            words.add("alpha" if a else "beta")
            reads += 1
        except Exception as exc:
            errors.append(repr(exc))
    print(json.dumps({"reads": reads, "bad": bad[:5], "errors": errors[:5], "words": sorted(words)}))
    """
)


@pytest.mark.slow
def test_concurrent_reader_process_never_sees_half_a_sync(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    directory = home.project_memory(KEY_C)
    _write_state(directory, "beta")
    refresh_all(home, today=date(2024, 5, 12))
    proc = subprocess.Popen(
        [sys.executable, "-c", READER_SCRIPT, str(REPO), str(home.search_db), KEY_C, str(N_CONCURRENT), "1.8"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Writes for as long as the reader reads (it decides when it has seen enough), not for a fixed 1.8 s
    # after a 0.3 s head start: a reader whose start-up outlasted that saw one state only.
    deadline = time.monotonic() + 150
    rounds = 0
    with SearchIndex.for_home(home) as idx:
        while (proc.poll() is None or rounds <= 2) and time.monotonic() < deadline:
            _write_state(directory, ("alpha", "beta")[rounds % 2])
            idx.sync({("project", KEY_C): scan_dir(directory, "project", KEY_C).memories})
            rounds += 1
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    report = json.loads(out)
    assert report["errors"] == [] and report["bad"] == []
    assert report["reads"] > 20 and rounds > 2
    assert report["words"] == ["alpha", "beta"]


# --------------------------------------------------------------------------- refresh


def test_refresh_writes_views_only_when_changed(home: Home) -> None:
    day = date(2024, 5, 12)
    first = refresh_dir(home, "global", None, home.global_memory, today=day)
    index_md = home.global_memory / "MEMORY.md"
    assert first.changed and first.index_written and first.drawer_written
    assert first.drawer_mode == "full" and first.problems == []
    assert "- [prefers-tabs](prefers-tabs.md) — the user indents with tabs" in index_md.read_text()
    assert "New files use tabs too." in home.drawer_render.read_text()
    assert stat.S_IMODE(home.drawer_render.stat().st_mode) == 0o600
    before = (index_md.stat().st_ino, home.drawer_render.stat().st_ino)

    again = refresh_dir(home, "global", None, home.global_memory, today=day)
    assert not again.changed and not again.index_written and not again.drawer_written
    assert again.search is not None and again.search.unchanged == 3
    assert (index_md.stat().st_ino, home.drawer_render.stat().st_ino) == before  # not rewritten

    put(home.global_memory, "new-pref", "feedback", "short answers", "Keep answers short.")
    third = refresh_dir(home, "global", None, home.global_memory, today=day)
    assert third.changed and third.index_written and third.drawer_written
    assert "new-pref" in index_md.read_text() and "Keep answers short." in home.drawer_render.read_text()


def test_refresh_project_does_not_touch_drawer(home: Home) -> None:
    res = refresh_dir(home, "project", PROJECT, home.project_memory(PROJECT), today=date(2024, 5, 12))
    assert res.index_written and not res.drawer_written and res.drawer_mode is None
    assert not home.drawer_render.exists()
    text = (home.project_memory(PROJECT) / "MEMORY.md").read_text()
    assert "## Project" in text and "- [deploy-process](deploy-process.md) — how releases reach production" in text


def test_refresh_reports_problems_and_keeps_indexing(home: Home) -> None:
    g = home.global_memory
    (g / "broken.md").write_text("---\nname: [unclosed\n---\n")
    (g / "MEMORY.md").symlink_to(home.root / "elsewhere.md")
    res = refresh_dir(home, "global", None, g, today=date(2024, 5, 12))
    reasons = {p.path.name: p.reason for p in res.problems}
    assert "front matter" in reasons["broken.md"]
    assert "not written" in reasons["MEMORY.md"]
    assert (g / "broken.md").read_text() == "---\nname: [unclosed\n---\n"
    assert (g / "MEMORY.md").is_symlink() and not (home.root / "elsewhere.md").exists()
    assert res.drawer_written  # the other views still happen
    with SearchIndex.for_home(home) as idx:
        assert names(idx.search("tabs", project_key=None)) == ["prefers-tabs"]


def test_refresh_index_warning_surfaces(home: Home) -> None:
    d = home.project_memory("-big")
    for i in range(205):
        put(d, f"m{i:03d}", "project", f"entry {i}", "b")
    res = refresh_dir(home, "project", "-big", d, today=date(2024, 5, 12))
    assert res.index_warning is not None and "205 entries" in res.index_warning
    assert (d / "MEMORY.md").read_text().startswith("> " + res.index_warning)


def test_refresh_drawer_degrades_to_index(home: Home) -> None:
    res = refresh_dir(home, "global", None, home.global_memory, max_bytes_drawer=450, today=date(2024, 5, 12))
    assert res.drawer_mode == "index"
    text = home.drawer_render.read_text()
    assert len(text.encode()) <= 450
    assert "New files use tabs too." not in text


def test_refresh_missing_global_dir_writes_nothing(tmp_path: Path) -> None:
    home = Home(tmp_path / "empty")
    res = refresh_dir(home, "global", None, home.global_memory, today=date(2024, 5, 12))
    assert not res.index_written and not res.drawer_written
    assert not home.global_memory.exists() and not home.drawer_render.exists()


def test_words_match_by_stem_and_plain_words_fall_back_to_prefixes(tmp_path: Path) -> None:
    """Stemming (porter): a word finds its other forms; a plain word that finds nothing is retried as a prefix."""

    text = "---\nname: deploys\ndescription: when we ship\nmetadata:\n  type: project\n---\nWe deploy on Fridays only.\n"
    f = tmp_path / "memory" / "deploys.md"
    f.parent.mkdir()
    f.write_text(text)
    m = parse_memory(f, text, mtime=f.stat().st_mtime, size=len(text), scope="global")
    with SearchIndex(tmp_path / "memd" / "search.sqlite", root=tmp_path) as db:
        db.sync({("global", None): [m]})
        assert [h.name for h in db.search("friday", project_key=None)] == ["deploys"]
        assert [h.name for h in db.search('"friday"', project_key=None)] == ["deploys"]  # a phrase is stemmed too
        assert [h.name for h in db.search("deploying", project_key=None)] == ["deploys"]
        assert [h.name for h in db.search("shipped", project_key=None)] == ["deploys"]
        assert db.search('"fri"', project_key=None) == []  # explicit syntax: no prefix fallback
        assert [h.name for h in db.search("frida", project_key=None)] == ["deploys"]  # plain: fallback fri*


_SEG_SOURCE = re.compile(rf"(?<=[{SPACELESS}])(?=\w)|(?<=\w)(?=\w)(?=[{SPACELESS}])")  # the one regex, compiled here


@hsettings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab _1é\u0301ßЖ\u0dfe\u0e00\u0e31กข部署\u3042\uac00\U00020000 -")))
def test_segment_skips_the_regex_only_for_text_it_could_not_change(text: str) -> None:
    """A text below the spaceless blocks is returned as it is, without compiling their class (the hooks'
    English prompts); every other text is segmented by the regex."""
    assert segment(text) == _SEG_SOURCE.sub(ZWSP, text)
    pieces = sentence_pieces(text.replace(" ", ""))
    assert pieces is None or any(ch >= "\u0e00" for ch in text)


def test_a_batch_of_new_rows_gets_the_ids_and_words_one_insert_at_a_time_gives(home: Home, index: SearchIndex) -> None:
    """A sync adding many rows inserts them in two statements with explicit ids: the same ids as
    one insert a row (after the largest id, in order, a deleted row's id not reused below it),
    and each row's full-text entry holds its own memory's words."""
    d = home.project_memory(PROJECT)
    (d / "cpp-style.md").unlink()
    index.sync(_scan(home))
    conn = sqlite3.connect(home.search_db)
    (top,) = conn.execute("SELECT MAX(id) FROM memories").fetchone()
    for i in range(5):
        put(d, f"batch-{i}", "project", f"batch note {i}", f"uniqueword{i}x about 用Python写 {i}")
    stats = index.sync(_scan(home))
    assert stats.added == 5
    rows = conn.execute("SELECT id, name FROM memories WHERE name LIKE 'batch-%' ORDER BY id").fetchall()
    assert rows == [(top + 1 + i, f"batch-{i}") for i in range(5)]
    for i in range(5):
        assert names(index.search(f"uniqueword{i}x", project_key=PROJECT)) == [f"batch-{i}"]
        assert (top + 1 + i,) in conn.execute("SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?",
                                              (f"uniqueword{i}x",)).fetchall()  # fmt: skip
    assert names(index.search("写", project_key=PROJECT)) != []  # segmented like every other row
    conn.close()
