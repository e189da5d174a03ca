"""Fuzzers for every parser a user's bytes reach (Hypothesis, a fixed budget).

Property, per parser: no exception escapes other than the parser's documented error, and each input costs a bounded
time per KB. The documented errors:

| parser | documented error |
|---|---|
| `parse_structured` (JSON, YAML) | `ParseError` with line and column |
| `parse_python` (ast, never executed) | `SyntaxError` |
| `parse_cmdline`, `read_log`, `read_trainer_state`, `text_facts`, `code_blocks` | none: facts or nothing |
| `read_attachments` (content detection + every parser) | none: a note on the file instead |
| run histories (`runs.read_text`: W&B, MLflow, trainer_log; TensorBoard events) | none: `RunData.problem` and a note |
| `parse_article` | `ValueError` (mostly boilerplate) |
| `load_issue` / `draft_case` | `DraftError` |
| `load_export` / `import_export` | `TrackerError` |

Inputs are structured, not only random text: real fixtures (`examples/`, `tests/fixtures/`, `eval/attachments/`)
mutated (slices cut, duplicated, spliced with odd unicode), generated configs and exports with fact-vocabulary keys
and hostile values (4,301+-digit integers, NaN, 1e400, wrong types), deep nesting, random bytes decoded.

Time is measured as the thread's CPU time (`time.thread_time`), so other processes loading the machine do not
make it flaky; Hypothesis' own wall-clock deadline is off for the same reason. Budget: ≤ 50 ms per KB + 0.5 s per
input. Runs derandomized with no example database (same inputs every run); all fuzzers together take ~20 s here and
are bounded well under 60 s by `max_examples`. TensorBoard, W&B, MLflow and trainer_log readers (app/facts/runs.py) are fuzzed
the same way (mutated fixtures and real event files with flipped, cut and spliced bytes).
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from app.facts import Attachment, code_blocks, read_attachments
from app.facts.cmdline import parse_cmdline
from app.facts.logs import read_log, read_trainer_state
from app.facts.pysnippet import parse_python
from app.facts.structured import ParseError, parse_structured
from app.facts.text import text_facts
from ingest.articles import load_article_files, parse_article
from ingest.github_issue import DraftError, draft_case, load_issue
from ingest.tracker import TrackerError, import_export, load_export

ROOT = Path(__file__).resolve().parent.parent
FIX = Path(__file__).resolve().parent / "fixtures"

MS_PER_KB = 50.0
CONST_S = 0.5


def _fixtures(*globs: str) -> list[str]:
    out = []
    for g in globs:
        for p in sorted(ROOT.glob(g)):
            if p.is_file() and p.stat().st_size < 64_000:
                out.append(p.read_text(encoding="utf-8", errors="replace"))
    assert out, globs
    return out


JSONS = _fixtures("examples/*.json", "eval/attachments/*.json")
YAMLS = _fixtures("examples/*.yaml", "eval/attachments/*.yaml", "eval/attachments/*.yml")
SHELLS = _fixtures("examples/*.sh", "eval/attachments/*.sh")
PYS = _fixtures("eval/attachments/*.py")
LOGS = _fixtures("examples/*.log", "eval/attachments/g1-*.log", "eval/attachments/*.txt")
STATES = _fixtures("examples/trainer_state.json", "eval/attachments/*trainer_state*.json")
HTMLS = _fixtures("tests/fixtures/articles/*.html")
ALL = JSONS + YAMLS + SHELLS + PYS + LOGS + HTMLS

FUZZ = settings(max_examples=100, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))

# ---------------------------------------------------------------- strategies

ODD = st.sampled_from([
    "\x00", "\ufeff", "\u202e", "\u200b", "\ud7ff", "\U0001f525", "训练", "ﬁ", "\r", "\r\n", "\t", "\x0b", "\x1b[31m",
    "\\", "`", "```", "'", '"', "{", "}", "[", "]", "&a", "*a", "!!python/tuple", "!custom", "<<: *a", "---", "...",
    "#", "%YAML 1.1", "|", ">", ":", ": ", "- ", "--", "--lr", "=", "nan", "inf", "-inf", "1e400", "1" * 4400, "0x1f",
    "(" * 40, ")" * 40, "<script>", "<!--", "]]>", "&#0;", "&#x110000;", "\udcff".encode("utf-8", "surrogatepass").decode("utf-8", "replace"),
])
TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=300)
JUNK = st.one_of(TEXT, st.binary(max_size=400).map(lambda b: b.decode("utf-8", "replace")), ODD)


@st.composite
def mutated(draw, pool: list[str]) -> str:
    """A real fixture with a few edits: cut, duplicate, splice junk, truncate, swap lines."""
    s = draw(st.sampled_from(pool))
    for _ in range(draw(st.integers(0, 4))):
        n = len(s)
        op = draw(st.sampled_from(["cut", "dup", "splice", "truncate", "swap", "indent"]))
        i = draw(st.integers(0, n))
        j = draw(st.integers(i, min(n, i + 400)))
        if op == "cut":
            s = s[:i] + s[j:]
        elif op == "dup":
            s = s[:j] + s[i:j] * draw(st.integers(1, 20)) + s[j:]
        elif op == "splice":
            s = s[:i] + draw(JUNK) + s[j:]
        elif op == "truncate":
            s = s[:i]
        elif op == "swap":
            lines = s.splitlines(keepends=True)
            if len(lines) > 1:
                a, b = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
                lines[a], lines[b] = lines[b], lines[a]
                s = "".join(lines)
        else:
            s = s[:i] + " " * draw(st.integers(1, 12)) + s[i:]
    return s


KEYS = st.sampled_from([
    "learning_rate", "lr", "bf16", "fp16", "zero_optimization", "stage", "communication_data_type", "train_batch_size",
    "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "finetuning_type", "lora_rank", "lora_target",
    "model_name_or_path", "template", "stage", "pref_beta", "max_grad_norm", "warmup_ratio", "packing", "neat_packing",
    "flash_attn", "torch_dtype", "offload_optimizer", "device", "loss_scale", "distributed_type", "log_history", "loss",
    "grad_norm", "step", "epoch", "actor_rollout_ref", "use_kl_loss", "kl_coef", "beta", "base_model", "datasets",
    "", " ", "a.b", "训练", "\x00",
])
HOSTILE = st.one_of(
    st.integers(), st.just("__HUGE__"), st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(), st.none(), TEXT, st.sampled_from(["auto", "fp32", "bf16", "1e-5", "3e-4", "nan", "inf", "1" * 4400, "-1", "0x10", "1_000"]),
)
JSONISH = st.recursive(HOSTILE, lambda kids: st.one_of(st.lists(kids, max_size=5), st.dictionaries(KEYS, kids, max_size=6)), max_leaves=30)


def deep(kind: str, depth: int) -> str:
    if kind == "json":
        return '{"a": ' * depth + "1" + "}" * depth
    if kind == "jsonlist":
        return "[" * depth + "]" * depth
    if kind == "yaml":
        depth = min(depth, 1000)  # the text grows with the square of the depth
        return "".join(" " * i + "a:\n" for i in range(depth)) + " " * depth + "b: 1\n"
    if kind == "flow":
        return "a: " + "[" * depth + "]" * depth
    if kind == "python":
        return "TrainingArguments(learning_rate=" + "(" * depth + "1" + ")" * depth + ")"
    if kind == "unary":
        return "x = " + "-" * depth + "1"
    if kind == "html":
        return "<div>" * depth + "loss nan " * 50 + "</div>" * depth
    return "a" * depth


DEEP = st.builds(deep, st.sampled_from(["json", "jsonlist", "yaml", "flow", "python", "unary", "html"]), st.sampled_from([10, 100, 1000, 10_000, 60_000]))


def dumps(v: object) -> str:
    """JSON with the `__HUGE__` marker turned into a 4,400-digit number (json cannot write one: int->str is capped)."""
    return json.dumps(v, allow_nan=True).replace('"__HUGE__"', "1" * 4400)


def _dump(v: object, how: str) -> str:
    if how == "json":
        return dumps(v)
    try:
        return yaml.safe_dump(v, allow_unicode=True).replace("__HUGE__", "1" * 4400)
    except (yaml.YAMLError, ValueError, RecursionError):
        return dumps(v)


GENERATED = st.builds(_dump, st.dictionaries(KEYS, JSONISH, max_size=8), st.sampled_from(["json", "yaml"]))
ANY = st.one_of(mutated(ALL), JUNK, DEEP, GENERATED)

# ---------------------------------------------------------------- the property


def bounded(fn, text: str, allowed: tuple[type[BaseException], ...] = ()):
    """Run fn; only `allowed` may escape; the thread's CPU time stays within the per-KB budget."""
    t0 = time.thread_time()
    try:
        out = fn()
    except allowed:
        out = None
    dt = time.thread_time() - t0
    kb = len(text.encode("utf-8", "replace")) / 1024
    assert dt <= CONST_S + MS_PER_KB * kb / 1000, f"{dt:.2f}s CPU for {kb:.1f} KB: {text[:300]!r}"
    return out


# ---------------------------------------------------------------- one fuzzer per parser


@FUZZ
@example(text='{"lr": ' + "1" * 4400 + "}", kind="json")
@example(text="lr: " + "1" * 4400, kind="yaml")
@example(text=deep("flow", 10_000), kind="yaml")
@example(text=deep("jsonlist", 10_000), kind="yaml")
@given(text=st.one_of(mutated(JSONS), GENERATED, DEEP, JUNK), kind=st.sampled_from(["json", "yaml"]))
def test_fuzz_structured(text, kind):
    out = bounded(lambda: parse_structured(text, "cfg", kind), text, (ParseError,))
    if out is not None:
        facts, _ = out
        assert all(f.file == "cfg" and f.line >= 0 for f in facts)


@FUZZ
@example(text="--lr 1 \\\n --x \x00 \x00abc \x00" + "1" * 4400)
@given(text=st.one_of(mutated(SHELLS), JUNK, DEEP, st.lists(st.sampled_from(["--lr", "--nproc_per_node", "\\\n", "=", "1" * 4400, "'", '"', "#", "x=1", "train_dpo.py", "nan", " "]), max_size=60).map(" ".join)))
def test_fuzz_cmdline(text):
    facts = bounded(lambda: parse_cmdline(text, "run.sh"), text)
    assert isinstance(facts, list)


@FUZZ
@example(text=deep("unary", 100_000))
@example(text="x = TrainingArguments(learning_rate=" + "1" * 4400 + ")")
@example(text="a\x00b = 1")
@given(text=st.one_of(mutated(PYS), JUNK, DEEP, st.builds(
    lambda call, kw, v: f"args = {call}({kw}={v})\n", st.sampled_from(["TrainingArguments", "LoraConfig", "AdamW", "from_pretrained", "DPOConfig"]),
    st.sampled_from(["learning_rate", "lr", "betas", "r", "torch_dtype", "bf16", "eps"]),
    st.sampled_from(["1" * 4400, "(1,)", "(1, 2, 3)", "('a', 'b')", "1e400", "torch.bfloat16", "[" * 50 + "]" * 50, "lambda: 0", "{1: 2}", "-" * 500 + "1", "'\\x00'", "b'x'", "1j"]),
)))
def test_fuzz_python(text):
    facts = bounded(lambda: parse_python(text, "train.py"), text, (SyntaxError,))
    assert facts is None or isinstance(facts, list)


@FUZZ
@given(text=st.one_of(mutated(LOGS), JUNK, st.lists(st.builds(
    lambda k, v, s: f"{{'{k}': {v}, 'step': {s}}}" if s % 2 else f"step {s} {k}: {v}",
    st.sampled_from(["loss", "grad_norm", "learning_rate", "kl", "entropy", "reward", "rewards/accuracies", "response_length/mean", "scale"]),
    st.sampled_from(["nan", "inf", "-inf", "0.0", "1e400", "-1e-400", "3.2", "1" * 4400, "NaN", "tensor(1.0)", "0.6931"]),
    st.integers(0, 10**6)), max_size=80).map("\n".join)))
def test_fuzz_log(text):
    facts = bounded(lambda: read_log(text.splitlines(), "train.log"), text)
    assert isinstance(facts, list)


STATE_REC = st.dictionaries(
    st.sampled_from(["loss", "grad_norm", "learning_rate", "step", "epoch", "eval_loss", "kl", "entropy", "reward", "x"]),
    st.one_of(HOSTILE, st.lists(HOSTILE, max_size=3), st.dictionaries(KEYS, HOSTILE, max_size=2)), max_size=6,
)
STATE_DOC = st.builds(lambda h, extra: dumps({"log_history": h, **extra}),
                      st.one_of(st.lists(STATE_REC, min_size=1, max_size=30), st.lists(st.one_of(STATE_REC, HOSTILE), max_size=30), HOSTILE),
                      st.dictionaries(KEYS, HOSTILE, max_size=3))


@FUZZ
@example(text='{"log_history": [{"step": "abc", "loss": 1}, {"step": null, "loss": [1]}, {"step": 1e999, "grad_norm": {}}]}')
@given(text=st.one_of(mutated(STATES), STATE_DOC))
def test_fuzz_trainer_state(text):
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        data = None
    facts = bounded(lambda: read_trainer_state(text, data, "trainer_state.json"), text)
    assert isinstance(facts, list)


@FUZZ
@given(text=st.one_of(TEXT, mutated(ALL), st.lists(st.sampled_from(["lr", "学习率", "3e-4", "1" * 4400, "zero3", "bf16", "not", "没有用", "qwen2-7b", "lora", "flash attn", " ", "\n", "已经"]), max_size=200).map(" ".join)))
def test_fuzz_text_and_code_blocks(text):
    facts = bounded(lambda: text_facts(text), text)
    assert isinstance(facts, list)
    prose, blocks = bounded(lambda: code_blocks(text), text)
    assert isinstance(prose, str) and all(isinstance(b.content, str) for b in blocks)


@FUZZ
@example(text='{"log_history": [{"step": "abc", "loss": 1}]}', name="trainer_state.json", as_bytes=False, question="")
@example(text='{"log_history": [{"loss": ' + "1" * 4400 + "}]}", name="trainer_state.json", as_bytes=False, question="")
@example(text='{"train_batch_size": ' + "1" * 4400 + "}", name="ds_config.json", as_bytes=False, question="--lr " + "1" * 4400)
@example(text=deep("unary", 100_000), name="train.py", as_bytes=False, question="")
@example(text=("sbatch: error: " + "x" * 300 + "\n" + "a" * 20000 + ": fatal: \n") * 200, name="x", as_bytes=False, question="")  # tool errors
@given(text=ANY, name=st.sampled_from(["ds_config.json", "train.yaml", "run.sh", "train.py", "train.log", "trainer_state.json", "notes.txt", "x", "",
                                        "a.yml", "env.txt", "训练.log"]),
       as_bytes=st.booleans(), question=st.one_of(st.just(""), TEXT, st.just("--lr 1e-5 --bf16 " + "--x " * 50)))
def test_fuzz_read_attachments(text, name, as_bytes, question):
    """Content detection picks the parser; whatever comes in, each file gets a note and nothing escapes."""
    att = Attachment(name=name, content=text.encode("utf-8", "replace") if as_bytes else text)
    fs = bounded(lambda: read_attachments([att, Attachment("b.json", text[:2000])], question), text)
    assert {n.file for n in fs.files} <= {name or "attachment", "b.json"} and len(fs.files) == 2
    assert all(n.message for n in fs.files)


@FUZZ
@given(text=st.one_of(mutated(HTMLS), JUNK, DEEP, st.lists(st.sampled_from(["<p>", "</p>", "<nav>", "<h2>原因</h2>", "<h2>Solutions</h2>", "<script>", "loss nan " * 20,
                                                                       "<div class='related'>", "</div>", "&amp;", "&#99999999;", "<title>", "<!--", "<![CDATA[", "\n"]), max_size=200).map("".join)),
       is_html=st.sampled_from([None, True, False]))
def test_fuzz_article(text, is_html):
    art = bounded(lambda: parse_article(text, "page.html", is_html), text, (ValueError,))
    assert art is None or (art.title and art.sections)


_SCRATCH = Path(tempfile.mkdtemp(prefix="trainfix-fuzz-"))
atexit.register(shutil.rmtree, _SCRATCH, True)

USER = st.one_of(st.fixed_dictionaries({"login": st.one_of(TEXT, HOSTILE)}), HOSTILE)
COMMENT = st.one_of(st.fixed_dictionaries({}, optional={"body": st.one_of(TEXT, HOSTILE, mutated(ALL)), "user": USER, "author": USER,
                                                        "author_association": st.one_of(st.sampled_from(["OWNER", "MEMBER", "NONE", "CONTRIBUTOR"]), HOSTILE),
                                                        "authorAssociation": HOSTILE, "role": HOSTILE}), HOSTILE)
ISSUE = st.fixed_dictionaries({}, optional={
    "html_url": st.one_of(st.just("https://github.com/o/r/issues/1"), TEXT, HOSTILE), "url": st.one_of(TEXT, HOSTILE),
    "title": st.one_of(st.just("loss nan"), TEXT, HOSTILE), "body": st.one_of(TEXT, HOSTILE, mutated(ALL), st.just("```json\n{\"lr\": 1}\n```")),
    "user": USER, "author": USER, "state": HOSTILE, "number": HOSTILE, "comments": st.one_of(st.lists(COMMENT, max_size=5), HOSTILE),
    "comments_data": st.one_of(st.lists(COMMENT, max_size=3), HOSTILE), "pull_request": HOSTILE,
    "closedByPullRequestsReferences": st.one_of(st.lists(st.one_of(st.fixed_dictionaries({"url": st.one_of(TEXT, HOSTILE)}), HOSTILE), max_size=2), HOSTILE),
    "closing_pr": HOSTILE,
})
EXPORT = st.one_of(
    st.builds(lambda xs: dumps(xs), st.lists(st.one_of(ISSUE, HOSTILE), max_size=6)),
    st.builds(lambda x: dumps({"issues": x}), st.one_of(st.lists(ISSUE, max_size=4), HOSTILE)),
    st.builds(lambda xs: "\n".join(dumps(x) for x in xs), st.lists(st.one_of(ISSUE, HOSTILE), max_size=6)),
    mutated([p.read_text(encoding="utf-8") for p in sorted((FIX / "tracker").glob("*.json*"))]),
    JUNK, DEEP,
)


@FUZZ
@example(text='{"html_url": "https://github.com/o/r/issues/1", "title": "t", "body": 5, "user": 3, "comments": [{"body": 7}]}')
@example(text='{"issue": {"html_url": "https://github.com/o/r/issues/1", "title": "t", "user": {"login": 4}}, "comments": 9}')
@given(text=st.one_of(EXPORT, st.builds(lambda i: dumps(i), ISSUE), st.builds(lambda i, c: dumps({"issue": i, "comments": c}), ISSUE, st.lists(COMMENT, max_size=3)),
                      mutated([p.read_text(encoding="utf-8") for p in sorted((FIX / "issues").glob("*.json"))])))
def test_fuzz_issue_loader(text):
    p = _SCRATCH / "issue.json"
    p.write_text(text, encoding="utf-8", errors="replace")

    def run():
        issue, comments = load_issue(p)
        return draft_case(issue, comments)

    out = bounded(run, text, (DraftError,))
    assert out is None or out[2].startswith("---\n")


@FUZZ
@example(text='[{"html_url": "https://github.com/o/r/issues/1", "title": "t", "n": ' + "1" * 4400 + "}]")
@example(text=deep("jsonlist", 10_000))
@given(text=EXPORT)
def test_fuzz_tracker_loader(text):
    p = _SCRATCH / "export.json"
    p.write_text(text, encoding="utf-8", errors="replace")
    threads = bounded(lambda: load_export(p), text, (TrackerError,))
    if threads is not None:
        rep = bounded(lambda: import_export(p, _SCRATCH / "home", dry_run=True), text, (TrackerError,))
        assert rep is None or rep.threads == len(threads)


@pytest.mark.parametrize("suffix", [".html", ".txt"])
def test_article_files_loader_reports_bad_pages(suffix):
    """The folder loader turns each bad page into a problem, not an exception (mutated fixtures and junk)."""
    d = Path(tempfile.mkdtemp(dir=_SCRATCH))
    pages = [*HTMLS, "", "\x00\x01", deep("html", 10_000), "<p>" + "x" * 10 + "</p>"]
    for i, t in enumerate(pages):
        (d / f"p{i}{suffix}").write_text(t, encoding="utf-8")
    arts, problems = load_article_files(d)
    assert len(arts) + len(problems) == len(pages) and problems


# ---------------------------------------------------------------- run histories (app/facts/runs.py): no documented error,
# a file that cannot be read gives RunData.problem and a note


def _tfevents_bytes() -> bytes:
    """A real TensorBoard event file written by tensorboard's own writer (loss with a NaN, grad_norm, lr)."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    d = Path(tempfile.mkdtemp(dir=_SCRATCH))
    w = EventFileWriter(str(d))
    for s in range(40):
        vals = [("train/loss", float("nan") if s == 30 else 2.0 - s * 0.01), ("train/grad_norm", 1.0 + s), ("train/learning_rate", 1e-5)]
        w.add_event(event_pb2.Event(step=s, wall_time=1.0 + s, summary=summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=t, simple_value=v) for t, v in vals])))
    w.close()
    return next(d.iterdir()).read_bytes()


RUN_TEXTS = _fixtures("tests/fixtures/runs/*")
RUN_ROW = st.dictionaries(st.sampled_from(["_step", "step", "train/loss", "loss", "train/grad_norm", "lr", "key", "value", "timestamp", "run_id", "current_steps", "x"]),
                          HOSTILE, max_size=6)
RUN_GEN = st.one_of(
    st.builds(lambda rows: "\n".join(dumps(r) for r in rows), st.lists(RUN_ROW, max_size=30)),
    st.builds(lambda rows: dumps({"metrics": rows}), st.lists(RUN_ROW, max_size=30)),
    st.builds(lambda cells: "Step,run-a - train/loss,run-a - train/grad_norm\n" + "\n".join(",".join(c) for c in cells),
              st.lists(st.lists(st.sampled_from(["1", "", "nan", "inf", "-1e400", "1" * 4400, "x", '"', "2.5"]), min_size=1, max_size=5), max_size=30)),
    st.builds(lambda cells: "key,value,step,timestamp\n" + "\n".join(",".join(c) for c in cells),
              st.lists(st.lists(st.sampled_from(["loss", "grad_norm", "1", "", "nan", "1" * 4400, "x", '"']), min_size=1, max_size=5), max_size=30)),
)


@FUZZ
@given(text=st.one_of(mutated(RUN_TEXTS), RUN_GEN), name=st.sampled_from(["history.jsonl", "export.csv", "metrics.json", "x.txt"]))
def test_fuzz_run_exports(text, name):
    """W&B / MLflow / trainer_log exports, by content detection and by each reader directly."""
    from app.facts.runs import read_text, sniff

    fs = bounded(lambda: read_attachments([Attachment(name, text)]), text)
    assert len(fs.files) == 1 and fs.files[0].message
    kind = sniff(text[:200000])
    if kind is not None:
        data = bounded(lambda: read_text(kind, text, None, name), text)
        assert data.problem is None or all(data.problem)


TFEVENTS = _tfevents_bytes()


@st.composite
def mutated_bytes(draw, base: bytes) -> bytes:
    b = base
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(b)))
        j = draw(st.integers(i, min(len(b), i + 64)))
        op = draw(st.sampled_from(["flip", "cut", "splice", "truncate", "dup"]))
        if op == "flip" and i < len(b):
            b = b[:i] + bytes([b[i] ^ draw(st.integers(1, 255))]) + b[i + 1:]
        elif op == "cut":
            b = b[:i] + b[j:]
        elif op == "splice":
            b = b[:i] + draw(st.binary(max_size=64)) + b[j:]
        elif op == "truncate":
            b = b[:i]
        else:
            b = b[:j] + b[i:j] * 5 + b[j:]
    return b


@FUZZ
@example(blob=TFEVENTS)
@given(blob=mutated_bytes(TFEVENTS))
def test_fuzz_tensorboard_events(blob):
    """A TensorBoard event file with flipped, cut and spliced bytes: read up to the damage, or refused, never raised."""
    fs = bounded(lambda: read_attachments([Attachment("events.out.tfevents.1.host", blob)]), "x" * len(blob))
    assert len(fs.files) == 1 and fs.files[0].message
