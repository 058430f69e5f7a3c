"""`memd list` from search rows (`scan.list_dir`) equals a scan of every file (`scan.scan_dir`), and a
reused row is peeked at for a missing front matter only when it `could_be_bare`."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from memd.index.refresh import refresh_dir
from memd.index.writer import SearchIndex
from memd.memory.file import render_memory
from memd.memory.names import candidate_names, is_candidate_name
from memd.memory.scan import _duplicate_rows, _duplicates, could_be_bare, list_dir, scan_dir
from memd.tree import Home


def _odd_home(tmp_path: Path) -> tuple[Home, Path]:
    home = Home(tmp_path / "h")
    d = home.project_memory("-p")
    d.mkdir(parents=True)
    w = lambda name, text: (d / name).write_text(text)  # noqa: E731
    w("a.md", render_memory("alpha", "first", "user", "x", {"source": "memd"}))
    w("b.md", render_memory("ALPHA", "same name, other case", "project", "y"))  # a duplicate (case-folded)
    w("c.md", render_memory("Ｃafé", "wide letters", "reference", "z"))
    w("d.md", render_memory("cafe", "not a duplicate of Ｃafé", "reference", "z"))
    w("bare.md", "# Heading only\n\ntext\n")  # no front matter
    w("project.md", render_memory("project", "the body's first line", "project", "the body's first line"))  # looks bare
    w("bad.md", "---\nname: [x\n---\n")
    w("notes.txt", "not a candidate")
    (d / "sub").mkdir()
    os.symlink(d / "a.md", d / "link.md")
    return home, d


def _scanned(d: Path, home: Home) -> tuple[list[tuple[str, ...]], list[tuple[str, str]]]:
    r = scan_dir(d, "project", "-p")
    mems = [(str(m.path.relative_to(home.root)), m.name, m.description, m.type, repr(m.mtime), str(m.size)) for m in r.memories]
    return mems, [(str(p.path), p.reason) for p in r.problems]


def _listed(d: Path, home: Home) -> tuple[list[tuple[str, ...]], list[tuple[str, str]]]:
    with SearchIndex.for_home(home) as db:  # the rows in file order, as `memd list` reads them
        rows = sorted((k[len(str(home.root)) + 1 :], m.name, m.description, m.type, m.mtime, m.size)
                      for k, m in db.known("project", "-p").items())  # fmt: skip
    listed, problems = list_dir(d, "project", "-p", rows, home.root)
    mems = [(f, name, desc, typ, repr(mtime), str(size)) for f, name, desc, typ, mtime, size in listed]
    return mems, [(str(p.path), p.reason) for p in problems]


def test_a_listing_from_rows_equals_a_scan_of_every_file(tmp_path: Path) -> None:
    home, d = _odd_home(tmp_path)
    assert _listed(d, home) == _scanned(d, home)  # no rows at all: every file parsed
    refresh_dir(home, "project", "-p", d)
    assert _listed(d, home) == _scanned(d, home)  # every row current
    (d / "c.md").write_text(render_memory("Ｃafé", "rewritten since the index", "reference", "zz"))
    (d / "a.md").unlink()
    (d / "e.md").write_text(render_memory("e", "new since the index", "user", "e"))
    got = _listed(d, home)
    assert got == _scanned(d, home)  # stale, gone and new files
    assert any(m[2] == "rewritten since the index" for m in got[0])


def test_only_a_row_that_could_be_bare_is_peeked_at(tmp_path: Path) -> None:
    home, d = _odd_home(tmp_path)
    refresh_dir(home, "project", "-p", d)
    with SearchIndex.for_home(home) as db:
        known = db.known("project", "-p")
    by_name = {Path(k).name: m for k, m in known.items()}
    assert could_be_bare(by_name["bare.md"]) and could_be_bare(by_name["project.md"])
    assert not any(could_be_bare(by_name[f]) for f in ("a.md", "b.md", "c.md", "d.md"))
    again = scan_dir(d, "project", "-p", known=known)
    assert [str(p.path) for p in again.notes] == [str(d / "bare.md")]  # the look-alike has front matter: no note
    assert [(m.name, m.description) for m in again.memories] == [(m.name, m.description) for m in scan_dir(d, "project", "-p").memories]


NAMES = ["a.md", "MEMORY.md", "memory.md", ".hidden.md", "#lock.md", "x.md~", "y.md.tmp", ".a.md.1234.tmp", "b.swp",
         "notes.txt", "c.MD", "d.md.bak", "ünï.md", "sp ace.md", "e.orig", "f.part.md", "", ".md", "#", "g.md.swp"]  # fmt: skip


def test_candidate_names_is_is_candidate_name_over_a_listing() -> None:
    assert candidate_names(NAMES) == [n for n in NAMES if is_candidate_name(n)]


@given(st.lists(st.text(alphabet=".#~mdMDa-_ tpswobkr", max_size=12).map(lambda s: s + ("" if len(s) % 3 else ".md"))))
def test_candidate_names_agrees_on_any_listing(names: list[str]) -> None:
    assert candidate_names(names) == [n for n in names if is_candidate_name(n)]


def _plain_home(tmp_path: Path) -> tuple[Home, Path]:
    home = Home(tmp_path / "h")
    d = home.project_memory("-p")
    d.mkdir(parents=True)
    for i, typ in enumerate(("user", "project", "feedback", "reference")):
        (d / f"m{i}.md").write_text(render_memory(f"m{i}", f"about m{i}", typ, f"body {i}", {"source": "memd"}))
    refresh_dir(home, "project", "-p", d)
    return home, d


def test_current_rows_are_the_listing_and_any_change_goes_file_by_file(tmp_path: Path) -> None:
    """The listing of a directory whose rows are exactly its files with their stats is the rows
    themselves; an edit in place (same inode), a file the rows lack or a row whose file is gone is
    seen as a scan of every file sees it."""
    home, d = _plain_home(tmp_path)
    assert _listed(d, home) == _scanned(d, home)
    st = (d / "m1.md").stat()
    with open(d / "m1.md", "r+") as fh:  # in place, as an editor may write: same inode, same size
        fh.write(render_memory("m1", "about M1", "project", "body 1", {"source": "memd"}))
    os.utime(d / "m1.md", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert (d / "m1.md").stat().st_ino == st.st_ino
    got = _listed(d, home)
    assert got == _scanned(d, home) and ("projects/-p/memory/m1.md", "m1", "about M1") in [m[:3] for m in got[0]]
    refresh_dir(home, "project", "-p", d)
    (d / "m4.md").write_text(render_memory("m4", "new", "user", "b"))  # a file the rows lack
    assert _listed(d, home) == _scanned(d, home)
    (d / "m4.md").unlink()
    (d / "m0.md").unlink()  # a row whose file is gone
    assert _listed(d, home) == _scanned(d, home)


def _names_problems(named: list[str]) -> list[tuple[str, str]]:
    rows = [(f"projects/-p/memory/f{i}.md", n, "", "user", 0.0, 0) for i, n in enumerate(named)]
    return [(str(p.path), p.reason) for p in _duplicate_rows(rows, "/h/")]


@given(st.lists(st.text(alphabet="aAbB \t\x1f\u00e9\u212a", max_size=5), max_size=8))
def test_duplicate_rows_flag_what_the_name_by_name_check_flags(named: list[str]) -> None:
    rows = [(f"projects/-p/memory/f{i}.md", n, "", "user", 0.0, 0) for i, n in enumerate(named)]
    want = _duplicates([(n, f"/h/{f}", f.rpartition("/")[2]) for f, n, *_ in rows])
    assert _names_problems(named) == [(str(p.path), p.reason) for p in want]


def test_duplicate_rows_see_case_and_uneven_spaces() -> None:
    assert len(_names_problems(["Deploy  window", "deploy window"])) == 1
    assert len(_names_problems([" a", "A"])) == 1 and len(_names_problems(["a\tb", "A b"])) == 1
    assert _names_problems(["a b", "ab", "a-b"]) == []


def test_candidate_names_of_a_listing_of_candidates_drops_only_the_index() -> None:
    names = ["b.md", "MEMORY.md", "a.md", "memory.md", "ünï.md"]
    assert candidate_names(names) == ["b.md", "a.md", "memory.md", "ünï.md"]
    assert candidate_names(["a.md", "b.md"]) == ["a.md", "b.md"] and candidate_names([]) == []
