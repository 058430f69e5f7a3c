"""Issue 26 point 5 on the offline path: a memory is written in the language of the statement it comes
from — labels, description and body. (The model path: tests/jobs/extract/test_run.py, the request
the fake API receives.)"""

from __future__ import annotations

from pathlib import Path

from jobs import extract
from jobs.extract.offline import find_durable
from memd.job.runner import run_job
from memd.memory.scan import scan_dir
from memd.tree import Place
from tests.jobkit import context, ingest, make_settings, write_session

TS = "2026-11-20T10:00:00Z"
KEY = "-home-dev-app"


def test_a_chinese_statement_becomes_a_chinese_memory_through_the_job(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_session(home / "projects" / KEY / "s1.jsonl",
                  [("user", "以后提交信息请用中文写。"), ("assistant", "好的。"),
                   ("user", "Never add emoji to commit messages."), ("assistant", "OK.")])  # fmt: skip
    ingest(home)
    ctx = context(home, make_settings(memd={"provider": "offline"}))
    try:
        assert run_job(ctx, extract, Place.session(KEY, "s1"), force=True).outcome == "ok"
    finally:
        ctx.conn.close()
    by = {m.description: m for m in scan_dir(home / "memory", "global", None).memories}
    zh, en = by["以后提交信息请用中文写。"], by["Never add emoji to commit messages."]
    assert "**为什么：**" in zh.body and "**怎么用：**" in zh.body and "用户明确这样说过" in zh.body
    assert "Why:" not in zh.body and "How to apply" not in zh.body
    assert "**Why:**" in en.body and "为什么" not in en.body


def test_chinese_labels_and_context_for_every_kind_of_memory() -> None:
    for said in ("在这个仓库里我们总是用 rebase 合并分支。", "我是前端工程师，主要写 TypeScript 和 React。",
                 "记住：这个项目的配置文件在 config/prod.yaml。"):  # fmt: skip
        [f] = find_durable([(said, TS)])
        assert f.body.startswith("**为什么：** 用户明确这样说过（2026-11-20）。\n**怎么用：** "), f.body
        assert f.description in said and f.description not in f.body


def test_a_chinese_word_in_an_english_statement_keeps_it_english() -> None:
    [f] = find_durable([("Remember that the docs for 支付 live in docs/payments.md.", TS)])
    assert "**Why:**" in f.body
