"""`trainfix eval`: hit@1, hit@3, MRR, nDCG@5 on the labelled questions, with baselines in the same run.

Modes: bm25 (lexical only), dense (Chroma only), hybrid (both, no triggers), full (the pipeline). The
sentence-transformers backend (English MiniLM) runs the full pipeline beside the default multilingual embedder.
Writes eval/report.md and eval/report.png; prints the misses of the full pipeline.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from app.facts import Attachment
from eval.real import as_case

EVAL_DIR = Path(__file__).resolve().parent
QUESTIONS = EVAL_DIR / "questions"
ATTACHMENTS = EVAL_DIR / "attachments"
MODES = ("full", "hybrid", "dense", "bm25")


class EvalError(Exception):
    pass


@dataclass
class Question:
    id: str
    lang: str
    q: str
    expected: list[str]
    attachments: list[str] = field(default_factory=list)
    file: str = ""
    line: int = 0
    category: str = ""
    source_lang: str = ""

    @property
    def offtopic(self) -> bool:
        return not self.expected


class _Loader(yaml.SafeLoader):
    pass


def _mapping(loader, node):
    m = yaml.SafeLoader.construct_mapping(loader, node)
    m["__line__"] = node.start_mark.line + 1
    return m


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def load_questions(cases: dict, folder: Path = QUESTIONS) -> list[Question]:
    """All labelled questions; any problem stops the run with file:line (no silent skips)."""
    out: list[Question] = []
    seen: dict[str, str] = {}
    files = sorted(folder.glob("*.yaml"))
    if not files:
        raise EvalError(f"no question files in {folder}")
    for f in files:
        try:
            data = yaml.load(f.read_text(encoding="utf-8"), Loader=_Loader)  # noqa: S506 - SafeLoader subclass
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            raise EvalError(f"{f.name}:{mark.line + 1 if mark else 0}: the file does not parse: {getattr(e, 'problem', e)}") from e
        if not isinstance(data, list):
            raise EvalError(f"{f.name}:1: expected a list of questions")
        for item in data:
            line = item.get("__line__", 0)
            where = f"{f.name}:{line}"
            for key in ("id", "lang", "q"):
                if not item.get(key):
                    raise EvalError(f"{where}: missing {key!r}")
            if item["lang"] not in ("en", "zh"):
                raise EvalError(f"{where}: lang must be en or zh")
            if item["id"] in seen:
                raise EvalError(f"{where}: duplicate id {item['id']!r} (also in {seen[item['id']]})")
            seen[item["id"]] = where
            expected = item.get("expected") or []
            for cid in expected:
                if cid not in cases:
                    raise EvalError(f"{where}: expected case {cid!r} does not exist")
            atts = item.get("attachments") or []
            for a in atts:
                if not (ATTACHMENTS / a).is_file():
                    raise EvalError(f"{where}: attachment {a!r} not found in eval/attachments/")
            first = cases[expected[0]] if expected else None
            out.append(
                Question(
                    id=item["id"], lang=item["lang"], q=item["q"], expected=expected, attachments=atts, file=f.name, line=line,
                    category=first.category if first else "off-topic", source_lang=first.source_lang if first else "",
                )
            )
    return out


def metrics(ranked: list[str], expected: list[str]) -> dict[str, float]:
    rel = [1 if r in expected else 0 for r in ranked]
    first = next((i for i, x in enumerate(rel) if x), None)
    dcg = sum(x / math.log2(i + 2) for i, x in enumerate(rel[:5]))
    idcg = sum(1 / math.log2(i + 2) for i in range(min(len(expected), 5)))
    return {
        "hit@1": float(first == 0),
        "hit@3": float(first is not None and first < 3),
        "mrr": 1.0 / (first + 1) if first is not None else 0.0,
        "ndcg@5": dcg / idcg if idcg else 0.0,
    }


def _mean(rows: list[dict[str, float]], key: str) -> float:
    return sum(r[key] for r in rows) / len(rows) if rows else float("nan")


def run_mode(engine, questions: list[Question], mode: str) -> tuple[list[dict], list[float]]:
    from app.diagnose import diagnose

    rows, lat = [], []
    for q in questions:
        atts = [Attachment(name=a.split("-", 2)[-1] if a.count("-") >= 2 else a, path=ATTACHMENTS / a) for a in q.attachments]
        trace: dict = {}
        t0 = time.perf_counter()
        d = diagnose(engine, q.q, atts, top=5, mode=mode, trace=trace)
        lat.append(time.perf_counter() - t0)
        # a thread note counts as the case it links to (the authored labels name cases only)
        ranked = list(dict.fromkeys(as_case(engine, c.case_id) for c in d.causes or d.related))
        m = metrics(ranked, q.expected) if q.expected else {"hit@1": float("nan"), "hit@3": float("nan"), "mrr": float("nan"), "ndcg@5": float("nan")}
        rows.append({**m, "q": q, "ranked": ranked, "confident": d.confident, "top_cos": trace.get("top_cos", 0.0), "trigger": trace.get("trigger", False)})
    return rows, lat


def _table(title: str, groups: dict[str, dict[str, list[dict]]], modes: list[str]) -> list[str]:
    out = [f"### {title}", "", "| group | n | " + " | ".join(f"{m} hit@1 | {m} hit@3" for m in modes) + " |", "|---|---|" + "---|---|" * len(modes)]
    for g, by_mode in groups.items():
        n = len(by_mode[modes[0]])
        cells = " | ".join(f"{_mean(by_mode[m], 'hit@1'):.3f} | {_mean(by_mode[m], 'hit@3'):.3f}" for m in modes)
        out.append(f"| {g} | {n} | {cells} |")
    return out + [""]


def _group(rows_by_mode: dict[str, list[dict]], key) -> dict[str, dict[str, list[dict]]]:
    groups: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for mode, rows in rows_by_mode.items():
        for r in rows:
            if r["q"].offtopic:
                continue
            groups[key(r["q"])][mode].append(r)
    return dict(sorted(groups.items()))


def main(subset: int = 0, baselines: bool = True, st_model: str | None = "minilm", floor: float = 0.0, write: bool = True, which: str = "all") -> bool:
    from app.embeddings import VectorCache, make_embedder
    from app.retrieve import Engine
    from app.settings import Settings
    from app.store import Store
    from ingest.pipeline import ingest

    settings = Settings()
    emb = make_embedder(settings.embedder, settings.threads)
    store = Store(settings, emb, VectorCache(settings.vector_cache))
    rep = ingest(store)
    print(f"index: {rep.summary()}", flush=True)
    engine = Engine(settings, emb)
    real_lines: list[str] = []
    if which in ("all", "real"):
        real_lines = run_real_set(engine, baselines)
        if which == "real":
            if write:
                _write_section(real_lines)
            return True
    questions = load_questions(engine.cases)
    if subset and subset < len(questions):
        step = len(questions) / subset
        questions = [questions[int(i * step)] for i in range(subset)]
    modes = list(MODES) if baselines else ["full"]
    rows_by_mode: dict[str, list[dict]] = {}
    lat_by_mode: dict[str, list[float]] = {}
    for mode in modes:
        t0 = time.perf_counter()
        rows_by_mode[mode], lat_by_mode[mode] = run_mode(engine, questions, mode)
        on = [r for r in rows_by_mode[mode] if not r["q"].offtopic]
        held = [r for r in on if r["q"].file.startswith("heldout")]
        if held:
            print(f"{'':7s} held-out ({len(held)}): hit@1 {_mean(held, 'hit@1'):.3f}  hit@3 {_mean(held, 'hit@3'):.3f}", flush=True)
        print(f"{mode:7s} hit@1 {_mean(on, 'hit@1'):.3f}  hit@3 {_mean(on, 'hit@3'):.3f}  MRR {_mean(on, 'mrr'):.3f}  nDCG@5 {_mean(on, 'ndcg@5'):.3f}  ({time.perf_counter() - t0:.0f}s)", flush=True)
    st_rows = None
    if st_model:
        st_settings = Settings(home=settings.home / "eval-st", embedder=f"st:{st_model}", vector_cache_path=settings.vector_cache)
        st_emb = make_embedder(st_settings.embedder)
        ingest(Store(st_settings, st_emb, VectorCache(st_settings.vector_cache)))
        st_rows, _ = run_mode(Engine(st_settings, st_emb), questions, "full")
        rows_by_mode[f"full-st:{st_model}"] = st_rows
        on = [r for r in st_rows if not r["q"].offtopic]
        print(f"full with st:{st_model}: hit@1 {_mean(on, 'hit@1'):.3f}  hit@3 {_mean(on, 'hit@3'):.3f}", flush=True)
    full = [r for r in rows_by_mode["full"] if not r["q"].offtopic]
    misses = [r for r in full if r["hit@1"] < 1]
    print(f"\nmisses of the full pipeline ({len(misses)}):")
    for r in misses:
        q = r["q"]
        print(f"  {q.id} [{q.lang}] {q.q[:90]!r}\n      expected {q.expected}  got {r['ranked'][:3]}")
    hit3 = _mean(full, "hit@3")
    if write:
        write_report(rows_by_mode, lat_by_mode, questions, misses, real_lines)
    if floor and hit3 < floor:
        print(f"\nFAIL: full-pipeline hit@3 {hit3:.3f} is below the floor {floor:.3f}")
        return False
    return True


def _calibration(rows: list[dict]) -> list[str]:
    """How well 'confident' separates right answers from wrong and off-topic ones."""
    on = [r for r in rows if not r["q"].offtopic]
    off = [r for r in rows if r["q"].offtopic]
    conf = [r for r in on if r["confident"]]
    lines = ["### Confidence", ""]
    lines.append(f"- on-topic questions answered confidently: {len(conf)}/{len(on)}; top-1 correct among them: {_mean(conf, 'hit@1'):.3f}; among the rest: {_mean([r for r in on if not r['confident']], 'hit@1'):.3f}")
    if off:
        lines.append(f"- off-topic questions answered confidently (should be 0): {sum(r['confident'] for r in off)}/{len(off)}")
    right = sorted(r["top_cos"] for r in on if r["hit@1"] == 1 and not r["trigger"])
    wrong = sorted(r["top_cos"] for r in on if r["hit@1"] < 1 and not r["trigger"])
    offc = sorted(r["top_cos"] for r in off)
    if right and offc:
        lines.append(f"- best-case cosine without a trigger: right answers median {statistics.median(right):.3f} (p10 {right[len(right) // 10]:.3f}); wrong answers median {statistics.median(wrong) if wrong else float('nan'):.3f}; off-topic median {statistics.median(offc):.3f} (max {offc[-1]:.3f})")
    return lines + [""]


def run_real_set(engine, baselines: bool = True) -> list[str]:
    """The real-thread yardstick, printed and returned as report lines."""
    from eval.real import MARGIN_HEADER, load_real, report_lines, run_real, summary
    from eval.real import MODES as RMODES

    qs = load_real(known=set(engine.item_ids))
    if not qs:
        return []
    rows = run_real(engine, qs, RMODES if baselines else ("full",))
    for m, rs in rows.items():
        for part, pick in (("all", lambda q: True), ("frozen", lambda q: q.frozen)):
            for lang in ("en", "zh"):
                s = summary([r for r in rs if pick(r["q"]) and r["q"].lang == lang])
                if s:
                    print(f"real {part:6s} {m:6s} {lang}: n {s['n']:3d} hit@1 {s['hit@1']:.3f} hit@3 {s['hit@3']:.3f} "
                          f"coverage {s['coverage']:.3f} conf-wrong {s['confident-but-wrong']:.3f} abstain {s['abstention']:.3f}", flush=True)
    lines = report_lines(rows)
    if MARGIN_HEADER in lines:  # the test, on the console too
        print("\n".join(lines[lines.index(MARGIN_HEADER):]).rstrip(), flush=True)
    return lines


def _write_section(real_lines: list[str]) -> None:
    """Replace only the real-thread section of an existing report."""
    path = EVAL_DIR / "report.md"
    old = path.read_text(encoding="utf-8") if path.exists() else "# trainfix evaluation\n"
    head, sep, rest = old.partition("## Real threads")
    tail = ""
    if sep:
        nxt = rest.find("\n## ", 1)
        tail = rest[nxt + 1 :] if nxt >= 0 else ""
    path.write_text(head.rstrip() + "\n\n" + "\n".join(real_lines) + "\n" + tail, encoding="utf-8")


def write_report(rows_by_mode, lat_by_mode, questions, misses, real_lines: list[str] | None = None) -> None:
    import platform

    modes = list(rows_by_mode)
    n_att = sum(1 for q in questions if q.attachments and not q.offtopic)
    on = [q for q in questions if not q.offtopic]
    lines = ["# trainfix evaluation", ""]
    lines.append(f"{len(on)} labelled questions ({sum(q.lang == 'zh' for q in on)} zh/mixed, {sum(q.lang == 'en' for q in on)} en; {n_att} with attachments; "
                 f"{sum(q.lang != q.source_lang for q in on)} cross-language) + {len(questions) - len(on)} off-topic. Machine: {platform.processor() or platform.machine()}, {_cpu()}.")
    lines += ["", "Reproduce: `trainfix eval` (writes this file and `eval/report.png`).", ""]
    lines += real_lines or []
    lines += ["## Authored questions (written with the cases; regressions only)", ""]
    lines.append("| mode | hit@1 | hit@3 | MRR | nDCG@5 | p50 ms | p95 ms |")
    lines.append("|---|---|---|---|---|---|---|")
    for m in modes:
        rs = [r for r in rows_by_mode[m] if not r["q"].offtopic]
        lat = sorted(lat_by_mode.get(m, []))
        p50 = f"{1000 * statistics.median(lat):.0f}" if lat else "–"
        p95 = f"{1000 * lat[int(0.95 * (len(lat) - 1))]:.0f}" if lat else "–"
        lines.append(f"| {m} | {_mean(rs, 'hit@1'):.3f} | {_mean(rs, 'hit@3'):.3f} | {_mean(rs, 'mrr'):.3f} | {_mean(rs, 'ndcg@5'):.3f} | {p50} | {p95} |")
    lines.append("")
    lines += _table("By question set (authored with the cases vs held out: paraphrased from real threads not cited by any case)",
                    _group(rows_by_mode, lambda q: "held-out" if q.file.startswith("heldout") else "authored"), modes)
    lines += _table("By language", _group(rows_by_mode, lambda q: q.lang), modes)
    lines += _table("With vs without attachments", _group(rows_by_mode, lambda q: "with attachments" if q.attachments else "question only"), modes)
    lines += _table("Same-language vs cross-language (question vs the case's source)", _group(rows_by_mode, lambda q: "same language" if q.lang == q.source_lang else "cross-language"), modes)
    lines += _table("By category", _group(rows_by_mode, lambda q: q.category), ["full", "bm25", "dense"] if "bm25" in modes else ["full"])
    lines += _calibration(rows_by_mode["full"])
    lines += ["## Misses of the full pipeline", ""]
    lines += [f"- `{r['q'].id}` [{r['q'].lang}] {r['q'].q[:100]} — expected `{r['q'].expected[0]}`, first `{(r['ranked'] or ['-'])[0]}`" for r in misses]
    (EVAL_DIR / "report.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    _chart(rows_by_mode, modes)
    print(f"\nwrote {EVAL_DIR / 'report.md'} and {EVAL_DIR / 'report.png'}")


def _cpu() -> str:
    import os

    model = ""
    try:
        for ln in Path("/proc/cpuinfo").read_text().splitlines():
            if ln.startswith("model name"):
                model = ln.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores {model}".strip()


def _chart(rows_by_mode, modes) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no chart (pip install -e '.[eval]')")
        return
    groups = ["all", "en", "zh"]
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / len(modes)
    for i, m in enumerate(modes):
        rs = [r for r in rows_by_mode[m] if not r["q"].offtopic]
        vals = [_mean(rs, "hit@1"), _mean([r for r in rs if r["q"].lang == "en"], "hit@1"), _mean([r for r in rs if r["q"].lang == "zh"], "hit@1")]
        ax.bar([g + i * width for g in range(len(groups))], vals, width, label=m)
    ax.set_xticks([g + 0.4 - width / 2 for g in range(len(groups))], groups)
    ax.set_ylim(0, 1)
    ax.set_ylabel("hit@1")
    ax.set_title("trainfix: hit@1 by retrieval mode and language")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(EVAL_DIR / "report.png", dpi=110)
