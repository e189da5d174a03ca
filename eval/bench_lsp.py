"""Speed of `trainfix lsp` as an editor sees it, over stdio with a real LSP client (pygls):

- start-up: process spawn to the `initialize` answer (median of N fresh processes), and to the first diagnostics;
- a change to a 300-line LLaMA-Factory YAML (one value edited after a pause) to its diagnostics, p50 / p90;
- a burst of 10 keystrokes 30 ms apart to the diagnostics of the last one (the debounce at work).

Usage: python -m eval.bench_lsp [--starts 5] [--changes 40]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

from lsprotocol import types as T
from pygls.lsp.client import LanguageClient

ROOT = Path(__file__).resolve().parent.parent
SERVER = [sys.executable, "-m", "app.cli", "lsp"]


def yaml_300() -> str:
    head = (ROOT / "examples" / "qwen2_full_sft.yaml").read_text(encoding="utf-8")
    n = 300 - head.count("\n")
    return head + "".join(f"# note {i}\n" if i % 5 == 0 else f"extra_option_{i}: {i}\n" for i in range(n))


class Client:
    def __init__(self) -> None:
        self.lc = LanguageClient("bench", "1")
        self.got: dict[tuple[str, int | None], float] = {}
        self.event = asyncio.Event()

        @self.lc.feature(T.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def _diag(ls: LanguageClient, p: T.PublishDiagnosticsParams) -> None:
            self.got[(p.uri, p.version)] = time.perf_counter()
            self.event.set()

    async def wait(self, uri: str, version: int, timeout: float = 60) -> float:
        end = time.perf_counter() + timeout
        while (uri, version) not in self.got:
            self.event.clear()
            await asyncio.wait_for(self.event.wait(), max(end - time.perf_counter(), 0.01))
        return self.got[(uri, version)]


async def start() -> tuple[Client, float]:
    c = Client()
    t0 = time.perf_counter()
    await c.lc.start_io(*SERVER, env={**os.environ, "HF_HUB_OFFLINE": "1"}, cwd=str(ROOT))
    await c.lc.initialize_async(T.InitializeParams(capabilities=T.ClientCapabilities(), process_id=os.getpid()))
    dt = time.perf_counter() - t0
    c.lc.initialized(T.InitializedParams())
    return c, dt


async def stop(c: Client) -> None:
    await c.lc.shutdown_async(None)
    c.lc.exit(None)
    await c.lc.stop()


def change(c: Client, uri: str, version: int, text: str) -> None:
    c.lc.text_document_did_change(T.DidChangeTextDocumentParams(
        text_document=T.VersionedTextDocumentIdentifier(uri=uri, version=version),
        content_changes=[T.TextDocumentContentChangeWholeDocument(text=text)]))


async def main(starts: int, changes: int) -> dict[str, float]:
    init, first = [], []
    text = yaml_300()
    uri = (ROOT / "bench_300.yaml").as_uri()
    for _ in range(starts):
        c, dt = await start()
        init.append(dt)
        t0 = time.perf_counter()
        c.lc.text_document_did_open(T.DidOpenTextDocumentParams(T.TextDocumentItem(uri=uri, language_id="yaml", version=1, text=text)))
        first.append(await c.wait(uri, 1) - t0)
        await stop(c)
    c, _ = await start()
    c.lc.text_document_did_open(T.DidOpenTextDocumentParams(T.TextDocumentItem(uri=uri, language_id="yaml", version=1, text=text)))
    await c.wait(uri, 1)
    lat = []
    v = 1
    for i in range(changes):
        await asyncio.sleep(0.3)  # a pause, as between edits
        v += 1
        new = text.replace("learning_rate: 3.0e-4", f"learning_rate: {3 + i % 7}.0e-4")
        t0 = time.perf_counter()
        change(c, uri, v, new)
        lat.append(await c.wait(uri, v) - t0)
    await asyncio.sleep(0.3)
    burst = []
    for _ in range(5):
        for k in range(10):
            v += 1
            change(c, uri, v, text.replace("cutoff_len: 2048", f"cutoff_len: 20{k}"))
            t_last = time.perf_counter()
            await asyncio.sleep(0.03)
        burst.append(await c.wait(uri, v) - t_last)
        await asyncio.sleep(0.3)
    await stop(c)
    q = statistics.quantiles(lat, n=10)
    return {"initialize_median_s": statistics.median(init), "initialize_max_s": max(init), "first_diagnostics_median_s": statistics.median(first),
            "change_p50_ms": 1000 * statistics.median(lat), "change_p90_ms": 1000 * q[8], "burst_last_keystroke_median_ms": 1000 * statistics.median(burst),
            "yaml_lines": text.count("\n"), "changes": changes, "starts": starts}


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--starts", type=int, default=5)
    ap.add_argument("--changes", type=int, default=40)
    a = ap.parse_args()
    t = time.process_time()
    res = asyncio.run(main(a.starts, a.changes))
    for k, val in res.items():
        print(f"{k}: {val:.3f}" if isinstance(val, float) else f"{k}: {val}")
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
