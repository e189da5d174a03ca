"""A diagnosis past its deadline gets 503 with Retry-After, and the server keeps answering everything else."""

from __future__ import annotations

import concurrent.futures as cf
import time

import httpx
import pytest
from conftest import ServerProc, api_server_args, clean_env, free_port

pytestmark = pytest.mark.serial  # timing under load: run alone (tests/run.sh)


def test_deadline_gives_503_and_health_stays_responsive(tmp_path, server_home, vector_cache):
    port = free_port()
    env = clean_env(server_home, TRAINFIX_VECTOR_CACHE_PATH=vector_cache, TRAINFIX_DIAGNOSE_TIMEOUT_S="0.001", TRAINFIX_WORKERS="1")
    srv = ServerProc(api_server_args(port), env, port, tmp_path / "server.log").start()
    try:
        srv.wait_http("/readyz")
        body = {"question": "loss goes to 0 after 10 steps " * 300}
        with cf.ThreadPoolExecutor(8) as ex:
            futs = [ex.submit(httpx.post, srv.url + "/v1/diagnose", json=body, timeout=60) for _ in range(8)]
            t0 = time.monotonic()
            health = httpx.get(srv.url + "/healthz", timeout=10)
            health_s = time.monotonic() - t0
            answers = [f.result() for f in futs]
        assert health.status_code == 200
        assert health_s < 5, health_s  # a budget, not a benchmark: the event loop is not held by the diagnoses
        assert all(r.status_code == 503 for r in answers), [r.status_code for r in answers]
        err = answers[0].json()["error"]
        assert err["code"] == "busy" and answers[0].headers["retry-after"] == "10" and err["request_id"]
        # the server keeps serving
        assert httpx.get(srv.url + "/v1/cases", timeout=30).status_code == 200
    finally:
        srv.stop()
