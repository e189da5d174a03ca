"""The documented curl examples against a live `trainfix serve`, and the retrieval-quality guard, on a copy of the
session's full index (a file of their own, so the two test workers share the docs tests)."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import time

import httpx
import pytest
from conftest import PY, ROOT
from docs_blocks import _env, blocks, expected_ids


def _free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_examples_against_a_live_server(docs_home, known_ids, tmp_path):
    port = 7860 if _free(7860) else next(p for p in range(7861, 7960) if _free(p))
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen([PY, "-m", "app.cli", "serve", "--port", str(port)], cwd=ROOT, env=_env(docs_home), stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        else:
            raise AssertionError("trainfix serve did not become ready: " + (tmp_path / "serve.log").read_text()[-2000:])
        ran = 0
        for name, line, body, skip in blocks():
            if skip or "curl" not in body:
                continue
            if "jq" in body and shutil.which("jq") is None:
                pytest.fail("jq is needed by a documented command (tests/run.sh installs it)")
            script = body.replace("127.0.0.1:7860", f"127.0.0.1:{port}")  # only when 7860 was taken
            r = subprocess.run(["bash", "-o", "pipefail", "-c", script], cwd=ROOT, env=_env(docs_home), capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, f"{name}:{line}: exited {r.returncode}: {r.stderr[-500:]}"
            assert '"error"' not in r.stdout.replace('"errors"', ""), f"{name}:{line}: {r.stdout[:500]}"
            for cid in expected_ids(body, known_ids):
                assert cid in r.stdout, f"{name}:{line}: output does not name {cid}"
            ran += 1
        assert ran >= 4
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_eval_regression_guard(docs_home):
    """The retrieval-quality floor (README, "Test it"): the authored set's first 80 questions keep hit@3 ≥ 0.92.
    Runs on the session's full index (the ingest inside `trainfix eval` finds it unchanged)."""
    cmd = [PY, "-m", "app.cli", "eval", "--set", "authored", "--subset", "80", "--no-baselines", "--st-model", "", "--no-write", "--min-hit3", "0.92"]
    r = subprocess.run(cmd, cwd=ROOT, env=_env(docs_home), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert re.search(r"full\s+hit@1 [0-9.]+\s+hit@3 (0\.9[2-9]|1\.0)", r.stdout), r.stdout[-2000:]


def test_kb_check_counts_a_linked_note_as_its_case(docs_home, monkeypatch):
    """`kb check --retrieval` scores a case's examples the way the eval does: a note that links the case stands for it."""
    from app.retrieve import Engine
    from app.settings import Settings

    monkeypatch.setenv("TRAINFIX_HOME", str(docs_home))
    eng = Engine(Settings())
    linked = next(n for n in eng.notes.values() if n.case)
    assert eng.as_case(linked.id) == linked.case
    plain = next(n for n in eng.notes.values() if not n.case)
    assert eng.as_case(plain.id) == plain.id and eng.as_case(linked.case) == linked.case
