"""Embedder threads: 0 means every core (up to 4); OpenBLAS is kept to one thread so its idle threads do not spin beside them."""

import os
import subprocess
import sys

from app.embeddings import embed_threads


def test_zero_threads_means_every_core_up_to_four_and_a_set_value_wins() -> None:
    cores = len(os.sched_getaffinity(0))
    assert embed_threads(0) == max(1, min(4, cores))
    assert embed_threads(3) == 3


def test_openblas_kept_to_one_thread_unless_the_caller_says_otherwise() -> None:
    code = "import app, os; print(os.environ['OPENBLAS_NUM_THREADS'])"
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert got == "1"
    got = subprocess.run([sys.executable, "-c", code], env={**env, "OPENBLAS_NUM_THREADS": "3"}, capture_output=True, text=True, check=True).stdout.strip()
    assert got == "3"
