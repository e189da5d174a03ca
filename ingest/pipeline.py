"""The idempotent ingest: cases (and articles) -> retrieval units -> Chroma, embedding only what changed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from app.kb import KB_DIR, Problem, load_cases, load_notes
from app.lexical import wait_warm, warm_cache
from app.models import Case, Note
from app.store import Store
from ingest.chunk import Unit, case_units, note_units


class IngestError(Exception):
    pass


@dataclass
class IngestReport:
    added: int = 0
    updated: int = 0
    removed: int = 0
    unchanged: int = 0
    cases: int = 0
    notes: int = 0
    articles: int = 0
    embedded: int = 0
    problems: list[Problem] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"{self.cases} cases, {self.notes} notes, {self.articles} articles: {self.added} added, {self.updated} updated, "
            f"{self.removed} removed, {self.unchanged} unchanged units ({self.embedded} embedded)"
        )


def _slot(unit_id: str) -> str:
    return unit_id.rsplit(":", 1)[0]


def collect(path: Path) -> tuple[list[Case], list[Unit], list[Problem], list, list[Note]]:
    """Cases and thread notes from a KB folder (or one case file) and articles (.txt/.html) under `path`."""
    from ingest.articles import article_units, load_article_files

    cases: list[Case] = []
    problems: list[Problem] = []
    case_root = path / "cases" if (path / "cases").is_dir() else path
    has_md = path.is_file() and path.suffix == ".md" or path.is_dir() and any(case_root.rglob("*.md"))
    if has_md:
        res = load_cases(case_root)
        cases, problems = res.cases, res.problems
    units = [u for c in cases for u in case_units(c)]
    notes: list[Note] = []
    if (path / "notes").is_dir():
        nres = load_notes(path / "notes", {c.id for c in cases} or None, origin="team" if path.name == "team" else "kb")
        notes, problems = nres.notes, problems + nres.problems
        units += [u for n in notes for u in note_units(n)]
    # a KB folder keeps its articles in articles/; any other folder (or file) is scanned as it is
    art_root = (path / "articles") if (path / "cases").is_dir() else path
    arts, art_problems = load_article_files(art_root) if art_root.exists() else ([], [])
    problems += art_problems
    for a in arts:
        units += article_units(a)
    return cases, units, problems, arts, notes


def ingest(
    store: Store,
    path: Path | None = None,
    rebuild: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> IngestReport:
    """Make the index mirror `path` (default: the project's kb/). Unchanged units are not embedded again."""
    path = (path or KB_DIR).resolve()
    if not path.exists():
        raise IngestError(f"{path}: no such file or folder")
    cases, units, problems, arts, notes = collect(path)
    n_articles = len(arts)
    if not units:
        where = "; ".join(str(p) for p in problems[:5])
        raise IngestError(f"no usable cases or articles found in {path}" + (f" ({where})" if where else ""))
    origin = str(path)
    for u in units:
        u.meta["origin"] = origin
    if rebuild:
        store.reset()
        store = Store(store.settings, store.embedder, store.cache)
    store.check_embedder(for_write=True)
    before_emb = store.embedder.documents_embedded
    store.write_manifest(embedder=store.embedder.id, complete=False)

    existing_ids, _, existing_metas = store.all_units(with_documents=False)
    mine = {i for i, m in zip(existing_ids, existing_metas, strict=True) if m.get("origin") == origin}
    new_by_id = {u.id: u for u in units}
    to_add = [u for u in units if u.id not in mine]
    to_remove = sorted(mine - set(new_by_id))
    # when units are written, the BM25 tokens of a large KB are computed in another process meanwhile (2 cores: ~6 s
    # saved on a first start); the reader then finds them in the cache. An unchanged KB starts no process.
    warm = warm_cache([u.text for u in units], store.settings.home / "cache") if to_add else None
    old_slots = {_slot(i) for i in to_remove}
    rep = IngestReport(cases=len(cases), notes=len(notes), articles=n_articles, problems=problems)
    rep.unchanged = len(units) - len(to_add)
    rep.updated = sum(1 for u in to_add if _slot(u.id) in old_slots)
    rep.added = len(to_add) - rep.updated
    rep.removed = len(to_remove) - rep.updated

    total = len(to_add)
    done = [0]

    def tick(n: int) -> None:
        done[0] += n
        if progress:
            progress(min(done[0], total), total)

    if to_add:
        store.add([u.id for u in to_add], [u.text for u in to_add], [u.meta for u in to_add], progress=tick,
                  keep_text=[u.meta.get("doc") == "article" for u in to_add])  # case and note texts come from their cards
    if to_remove:
        store.delete(to_remove)
    store.write_cards(cases, origin, arts, notes)
    store.write_manifest(embedder=store.embedder.id, complete=True, units=store.count(), cases=store.count_cards("case"))
    rep.embedded = store.embedder.documents_embedded - before_emb
    wait_warm(warm)
    return rep


def kb_units(path: Path | None = None) -> list[Unit]:
    """The retrieval units of the project's KB (cases and notes), as ingest makes them."""
    return collect((path or KB_DIR).resolve())[1]
