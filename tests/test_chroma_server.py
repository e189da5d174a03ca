"""A shared index on a real Chroma server (`chroma run` on loopback): ingest into it, answer from two trainfix
processes sharing it, 503 while it is down, recovery when it is back."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
from conftest import PY, ROOT, ServerProc, api_server_args, clean_env, free_port

CHROMA = shutil.which("chroma", path=str(Path(PY).parent)) or shutil.which("chroma")
TOP_CASE = "deepspeed-comm-dtype-fp32-loss-zero"
QUESTION = {
    "question": "loss goes to 0 after 10 steps",
    "attachments": [{"name": "ds_config.json", "content": '{\n  "bf16": {"enabled": true},\n  "communication_data_type": "fp32"\n}\n'}],
}

pytestmark = pytest.mark.skipif(CHROMA is None, reason="the chroma CLI (pip package chromadb) is not installed")


def start_chroma(path: Path, port: int, log: Path) -> ServerProc:
    srv = ServerProc([CHROMA, "run", "--path", str(path), "--host", "127.0.0.1", "--port", str(port)], clean_env(path), port, log).start()
    srv.wait_http("/api/v2/heartbeat", timeout=120)
    return srv


def test_two_processes_share_a_chroma_server_and_survive_its_restart(tmp_path, server_kb, vector_cache):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    chroma = start_chroma(tmp_path / "chroma-data", port, tmp_path / "chroma.log")
    apis: list[ServerProc] = []
    try:
        # ingest through the HTTP client (vectors come from the shared cache: nothing is embedded twice)
        env = clean_env(tmp_path / "ingest-home", TRAINFIX_CHROMA_URL=url, TRAINFIX_VECTOR_CACHE_PATH=vector_cache)
        r = subprocess.run([PY, "-m", "app.cli", "ingest", str(server_kb), "--json"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
        assert '"cases": 6' in r.stdout
        assert not (tmp_path / "ingest-home" / "index").exists()  # nothing was written to an embedded index

        for name in ("a", "b"):
            p = free_port()
            e = clean_env(tmp_path / f"home-{name}", TRAINFIX_CHROMA_URL=url, TRAINFIX_VECTOR_CACHE_PATH=vector_cache)
            apis.append(ServerProc(api_server_args(p), e, p, tmp_path / f"api-{name}.log").start())
        for api in apis:
            ready = api.wait_http("/readyz", timeout=180).json()
            assert ready["cases"] == 6 and ready["store"] == f"chroma server {url}"
            d = httpx.post(api.url + "/v1/diagnose", json=QUESTION, timeout=60)
            assert d.status_code == 200, d.text
            assert d.json()["causes"][0]["case_id"] == TOP_CASE
            assert not (Path(api.env["TRAINFIX_HOME"]) / "index").exists()
        slack_off = httpx.post(apis[0].url + "/slack/events", json={}, timeout=30)
        assert slack_off.status_code == 503 and slack_off.json()["error"]["code"] == "slack_not_configured"

        # the Chroma server goes away: clear 503s, not 500s or hangs. Process a is asked a question first (its engine
        # holds a client to the dead server), process b is asked /readyz first.
        chroma.stop()
        for i, api in enumerate(apis):
            for what in (("diagnose", "readyz") if i == 0 else ("readyz", "diagnose")):
                if what == "readyz":
                    r = httpx.get(api.url + "/readyz", timeout=60)
                    assert r.status_code == 503, r.text
                    err = r.json()["error"]
                    assert err["code"] == "index_unavailable", err
                    assert f"127.0.0.1:{port}" in err["message"], err  # says which server
                else:
                    r = httpx.post(api.url + "/v1/diagnose", json=QUESTION, timeout=60)
                    assert r.status_code == 503, r.text
                    assert r.json()["error"]["code"] == "index_unavailable"
                    assert f"127.0.0.1:{port}" in r.json()["error"]["message"]
            assert httpx.get(api.url + "/healthz", timeout=30).status_code == 200  # the process itself is fine

        # it comes back (same data, same port): both processes recover without a restart
        chroma = start_chroma(tmp_path / "chroma-data", port, tmp_path / "chroma.log")
        for api in apis:
            api.wait_http("/readyz", timeout=120)
            d = httpx.post(api.url + "/v1/diagnose", json=QUESTION, timeout=60)
            assert d.status_code == 200, d.text
            assert d.json()["causes"][0]["case_id"] == TOP_CASE
    finally:
        for api in apis:
            api.stop()
        chroma.stop()
