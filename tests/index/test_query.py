"""memd's search syntax (memd/index/query.py): whatever is typed, one valid MATCH or one line why not."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memd.index.query import parse_query
from memd.index.search import open_readonly, parse, query_index
from memd.index.writer import SearchIndex
from memd.memory.file import parse_memory
from tests.procs import run_memd

MEMORY = "---\nname: {name}\ndescription: {desc}\nmetadata:\n  type: project\n---\n{body}\n"
DOCS = {
    "cpp-style": ("C++ style", "we write modern C++ with RAII", "No raw new; smart pointers only."),
    "c-code": ("C code", "the firmware is plain C", "Compile with -Wall; the C codebase targets C99."),
    "credo-lint": ("credo lint", "run mix credo before every push", "Credo checks the Elixir style."),
    "deploy-friday": ("deploy on fridays", "never deploy to production on Fridays", "Staging deploys are fine."),
    "staging-db": ("staging database", "the staging database is reset nightly", "Seeds run after the reset."),
    "memory-zh": ("记忆设计", "长期记忆系统的设计", "用户喜欢简洁的方案。"),
}


@pytest.fixture
def db(tmp_path: Path) -> sqlite3.Connection:
    mems = []
    for name, (title, desc, body) in DOCS.items():
        f = tmp_path / "memory" / f"{name}.md"
        f.parent.mkdir(exist_ok=True)
        text = MEMORY.format(name=title, desc=desc, body=body)
        f.write_text(text)
        mems.append(parse_memory(f, text, mtime=f.stat().st_mtime, size=len(text), scope="global"))
    path = tmp_path / "memd" / "search.sqlite"
    with SearchIndex(path, root=tmp_path) as index:
        index.sync({("global", None): mems})
    conn = open_readonly(path)
    yield conn
    conn.close()


def files(conn: sqlite3.Connection, q: str) -> list[str]:
    return sorted(Path(h.file).stem for h in query_index(conn, q, project_key=None, limit=50))


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("C++", ["cpp-style"]),  # the word c++, not every word starting with c
        ("-credo deploy", ["deploy-friday"]),
        ("deploy -staging", []),  # both deploy memories mention staging
        ("deploy NOT credo", ["deploy-friday"]),
        ("staging AND reset", ["staging-db"]),
        ("staging OR credo", ["credo-lint", "deploy-friday", "staging-db"]),
        ('"never deploy"', ["deploy-friday"]),
        ('"deploy never"', []),
        ("name:credo", ["credo-lint"]),
        ("description:firmware", ["c-code"]),
        ("body:firmware", []),
        ("deplo*", ["deploy-friday"]),
        ('"deplo"*', ["deploy-friday"]),  # a quoted prefix, as recall's prefix pass writes it
        ("deploying", ["deploy-friday"]),  # stems
        ("记忆", ["memory-zh"]),
        ("设计 -credo", ["memory-zh"]),
    ],
)
def test_operators_mean_what_the_help_says(db: sqlite3.Connection, query: str, expected: list[str]) -> None:
    assert files(db, query) == expected


@pytest.mark.parametrize("query", ["*", "-credo", "NOT credo", "((( )))", "", "   ", "AND", "OR OR", '""', "^"])
def test_nothing_to_look_for_is_one_line_never_an_exception(db: sqlite3.Connection, query: str) -> None:
    p = parse(query)
    assert p.error and "\n" not in p.error and p.match == ""
    assert query_index(db, query, project_key=None) == []


def test_what_is_not_an_operator_is_said() -> None:
    assert any("not a field" in n for n in parse_query("nosuch:thing").notes)
    assert any("prefix" in n for n in parse_query("deploy *").notes)
    assert any("operator" in n for n in parse_query("deploy^").notes)
    assert parse_query("deploy-process").notes == ()  # a hyphenated word is just words
    assert parse_query("how do we deploy to prod").words == ("deploy", "prod")  # stopwords left out


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list('ab c+*-"():^{}NOTANDR记忆:\n\tx_.,')), max_size=30))
def test_any_text_gives_a_valid_match(text: str) -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(name, description, body, tokenize = \"porter unicode61 tokenchars '+'\")")
    conn.execute("INSERT INTO t VALUES ('a', 'b c++', 'x')")
    p = parse(text)
    if p.error is None:
        conn.execute("SELECT * FROM t WHERE t MATCH ?", (p.match,)).fetchall()  # never an FTS5 syntax error


def test_cli_search_takes_what_a_person_types(tmp_path: Path) -> None:
    home = tmp_path / "h"
    d = home / "memory"
    d.mkdir(parents=True)
    for name, (title, desc, body) in DOCS.items():
        (d / f"{name}.md").write_text(MEMORY.format(name=title, desc=desc, body=body))
    r = run_memd(home, "search", "-credo", "deploy", "--json")
    assert r.returncode == 0, r.stderr
    assert "deploy on fridays" in r.stdout and "credo lint" not in r.stdout
    r = run_memd(home, "search", "C++", "--json")
    assert r.returncode == 0 and "C++ style" in r.stdout and "C code" not in r.stdout
    r = run_memd(home, "search", "*")
    assert r.returncode == 2 and "nothing" not in r.stdout and "no word to search for" in r.stderr
    assert len(r.stderr.strip().splitlines()) <= 2
    r = run_memd(home, "search", "deploy^")
    assert r.returncode == 0 and "not an operator" in r.stderr and "deploy on fridays" in r.stdout
    r = run_memd(home, "search", "--help")
    assert "-staging" in r.stdout and "name:tabs" in r.stdout


def test_recall_prefix_pass_finds_a_cut_word(db: sqlite3.Connection) -> None:
    """offline recall retries words as quoted prefixes (`"frida"*`) when no whole word is found."""
    from memd.agent.candidates import offline_pick  # noqa: PLC0415

    picks = offline_pick(db, "frida", "-work-x", ())
    assert [Path(c.file).stem for c in picks] == ["deploy-friday"]
