"""trainfix: diagnose LLM and deep-learning training failures from symptoms, configs and logs."""

import os

# The dense search is one small matrix-vector product; OpenBLAS's own threads then spin beside the embedder's and
# doubled a question's time on 2 cores (eval/bench.md). Set before numpy loads; a caller's own setting wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
