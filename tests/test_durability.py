"""Feedback under load: a per-client rate limit, and every acknowledged row survives `kill -9` of the server."""

from __future__ import annotations

import concurrent.futures as cf
import signal
import sqlite3

import httpx
import pytest
from conftest import ServerProc, api_server_args, clean_env, free_port

pytestmark = pytest.mark.serial  # timing under load: run alone (tests/run.sh)


def test_rate_limit_and_acknowledged_rows_survive_kill_9(tmp_path, server_home, vector_cache):
    port = free_port()
    env = clean_env(server_home, TRAINFIX_VECTOR_CACHE_PATH=vector_cache)
    srv = ServerProc(api_server_args(port), env, port, tmp_path / "server.log").start()
    acked: list[int] = []
    try:
        srv.wait_http("/healthz")

        def send(i: int) -> httpx.Response:
            return httpx.post(srv.url + "/v1/feedback", json={"kind": "up", "question": f"durability {i}"}, timeout=30)

        with cf.ThreadPoolExecutor(8) as ex:
            answers = list(ex.map(send, range(60)))
        codes = [r.status_code for r in answers]
        assert codes.count(201) >= 25 and 429 in codes, codes  # a burst of ~30, then the client is slowed down
        limited = next(r for r in answers if r.status_code == 429)
        assert limited.headers["retry-after"] and limited.json()["error"]["code"] == "too_many_requests"
        acked = [r.json()["id"] for r in answers if r.status_code == 201]
        srv.proc.send_signal(signal.SIGKILL)  # no shutdown, no flush
        srv.proc.wait(timeout=10)
    finally:
        srv.stop()
    con = sqlite3.connect(str(server_home / "feedback.sqlite"))  # opening it runs WAL recovery, as a restart would
    try:
        rows = {r[0] for r in con.execute("select id from feedback where question like 'durability %'")}
        mode = con.execute("pragma journal_mode").fetchone()[0]
    finally:
        con.close()
    assert mode == "wal"
    assert set(acked) <= rows, sorted(set(acked) - rows)
    # and a restarted server serves again on the same data
    srv2 = ServerProc(api_server_args(port), env, port, tmp_path / "server2.log").start()
    try:
        srv2.wait_http("/healthz")
        assert httpx.post(srv2.url + "/v1/feedback", json={"kind": "down", "question": "after restart"}, timeout=30).status_code == 201
    finally:
        srv2.stop()
