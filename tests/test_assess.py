"""The assess stage on a real index: scoping, symptom compatibility, contradictions, follow-ups, likelihood, notes."""

from __future__ import annotations

import textwrap

import pytest
import yaml
from conftest import copy_cases, make_settings

from app.diagnose import Turn, diagnose
from app.facts import Attachment
from app.fixes import adapt

CASES = [
    "loss_zero/deepspeed-comm-dtype-fp32-loss-zero",
    "loss_zero/trainer-nan-filter-logs-zero-loss",
    "loss_zero/torch-2-5-0-cudnn-sdpa-nan-loss-zero",
    "deepspeed_zero/deepspeed-hardcoded-values-mismatch",
    "preference_optimization/openrlhf-kto-vanilla-loss-nan",
    "lr_schedule/qwen2-full-sft-lr-3e-4-generation-nan",
    "distributed_comm/nccl-timeout-long-preprocessing",
    "distributed_comm/nccl-p2p-hang-consumer-gpus",
    "fp16_overflow/fp16-activation-overflow-bf16-native-models",
    "memory_oom/cuda-allocator-fragmentation-oom",
]

NOTE = {
    "id": "test-note-ascend-hccl",
    "url": "https://example.org/threads/ascend-hccl-timeout",
    "title": "HCCL timeout on Ascend 910B during the first all-reduce",
    "lang": "en",
    "category": "distributed_comm",
    "frameworks": ["deepspeed"],
    "evidence": "reporter-confirmed",
    "symptom": {"en": "Training on Ascend 910B hangs at the first all-reduce and then fails with an HCCL timeout error.",
                "zh": "在昇腾 910B 上训练，第一次 all-reduce 卡住，随后报 HCCL 超时。"},
    "resolution": {"en": "Raising HCCL_CONNECT_TIMEOUT and HCCL_EXEC_TIMEOUT let the slow first step finish.",
                   "zh": "调大 HCCL_CONNECT_TIMEOUT 和 HCCL_EXEC_TIMEOUT 后，较慢的第一步得以完成。"},
}


LINKED = {  # a thread note traced to a case of the fixture: it supports that case and folds into it
    "id": "test-note-4090-p2p",
    "url": "https://example.org/threads/4090-ddp-freeze",
    "title": "Two RTX 4090 freeze at the first all_reduce in DDP",
    "lang": "en",
    "category": "distributed_comm",
    "frameworks": ["pytorch"],
    "evidence": "reporter-confirmed",
    "symptom": {"en": "DDP on several RTX 4090 cards freezes at the first all_reduce collective (nccl-tests hangs as well), GPUs at "
                      "100 % utilisation, no progress; one GPU and the A100 servers work.",
                "zh": "多张 RTX 4090 跑 DDP，在第一次 all_reduce 集合通信卡住（nccl-tests 也卡死），GPU 利用率 100%，没有进度；单卡和 A100 "
                      "服务器正常。"},
    "resolution": {"en": "Setting NCCL_P2P_DISABLE=1 let training run.", "zh": "设置 NCCL_P2P_DISABLE=1 后训练正常。"},
    "case": "nccl-p2p-hang-consumer-gpus",
}


@pytest.fixture(scope="module")
def engine(tmp_path_factory, vector_cache, embedder):
    from app.embeddings import VectorCache
    from app.retrieve import Engine
    from app.store import Store
    from ingest.pipeline import ingest

    kb = copy_cases(tmp_path_factory.mktemp("assesskb"), CASES)
    (kb / "notes").mkdir()
    (kb / "notes" / "test.yaml").write_text(yaml.safe_dump([NOTE, LINKED], allow_unicode=True), encoding="utf-8")
    settings = make_settings(tmp_path_factory.mktemp("assesshome"), vector_cache)
    rep = ingest(Store(settings, embedder, VectorCache(settings.vector_cache)), kb)
    assert rep.notes == 2 and not [p for p in rep.problems if "note" in p.message]
    return Engine(settings, embedder)


def ranked_ids(d):
    return [c.case_id for c in (d.causes or d.related)]


OPENRLHF = textwrap.dedent("""\
    deepspeed --module openrlhf.cli.train_kto \\
       --pretrain Qwen/Qwen2-7B-Instruct --zero_stage 3 --bf16 \\
       --train_batch_size 64 --micro_train_batch_size 1 \\
       --learning_rate 5e-7 --beta 0.1
    """)


def test_launcher_flags_do_not_fire_a_deepspeed_json_case(engine):
    """The issue's example: OpenRLHF's batch-size and ZeRO flags are not literals of a hand-written DeepSpeed JSON."""
    d = diagnose(engine, "KTO training with OpenRLHF: the loss becomes nan after a few steps", [Attachment("run_kto.sh", OPENRLHF)])
    ids = ranked_ids(d)
    assert ids[0] == "openrlhf-kto-vanilla-loss-nan"
    hard = [c for c in d.causes + d.related + d.also_noticed if c.case_id == "deepspeed-hardcoded-values-mismatch"]
    assert all(not c.evidence for c in hard)  # nothing in the launch line counts as its evidence
    # the same value written in a DeepSpeed JSON does fire it
    ds = '{\n  "train_batch_size": 64,\n  "train_micro_batch_size_per_gpu": 1,\n  "zero_optimization": {"stage": 3}\n}'
    d2 = diagnose(engine, "AssertionError: train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size", [Attachment("ds_config.json", ds)])
    assert ranked_ids(d2)[0] == "deepspeed-hardcoded-values-mismatch"
    assert any("ds_config.json:2" in e for e in (d2.causes or d2.related)[0].evidence)


LOG_FINITE = "\n".join(
    [f"{{'loss': {v}, 'grad_norm': {g}, 'learning_rate': 1e-05, 'epoch': {i / 100:.2f}}}" for i, (v, g) in enumerate(
        [(2.1, 3.2), (1.9, 2.8), (0.0, 1.7), (0.0, 1.5), (0.0, 1.4), (0.0, 1.2), (0.0, 1.3), (0.0, 1.1)])]
)
LOG_NAN = "\n".join(
    [f"{{'loss': {v}, 'grad_norm': {g}, 'learning_rate': 1e-05, 'epoch': {i / 100:.2f}}}" for i, (v, g) in enumerate(
        [(2.1, 3.2), (1.9, 2.8), (0.0, "nan"), (0.0, "nan"), (0.0, "nan"), (0.0, "nan"), (0.0, "nan"), (0.0, "nan")])]
)


def test_a_finite_grad_norm_contradicts_the_hidden_nan_cause(engine):
    q = "full fine-tune, the loss drops to 0.0 after two steps and stays there"
    with_nan = diagnose(engine, q, [Attachment("train.log", LOG_NAN)], trace=(t_nan := {}))
    finite = diagnose(engine, q, [Attachment("train.log", LOG_FINITE)], trace=(t_fin := {}))
    pos = {a.item_id: k for k, a in enumerate(t_fin["assessment"].ranked)}
    nan_item = next(a for a in t_nan["assessment"].ranked if a.item_id == "trainer-nan-filter-logs-zero-loss")
    fin_item = next(a for a in t_fin["assessment"].ranked if a.item_id == "trainer-nan-filter-logs-zero-loss")
    assert fin_item.reason("contradiction") is not None and nan_item.reason("contradiction") is None
    assert fin_item.score < nan_item.score / 2
    assert ranked_ids(with_nan)[0] == "trainer-nan-filter-logs-zero-loss"
    assert pos["trainer-nan-filter-logs-zero-loss"] > 0
    shown = next((c for c in finite.causes + finite.related if c.case_id == "trainer-nan-filter-logs-zero-loss"), None)
    if shown is not None:  # if it is still listed, the user sees why it is unlikely
        assert any("finite grad_norm" in e for e in shown.evidence)


DS_FP32 = '{\n  "bf16": {"enabled": true},\n  "communication_data_type": "fp32",\n  "zero_optimization": {"stage": 2}\n}'


@pytest.mark.parametrize(
    ("follow_up", "lang"),
    [
        ("I already removed it and the loss still collapses", "en"),  # the documented example (docs/server.md)
        ("我已经去掉了 communication_data_type，loss 还是 0", "zh"),
    ],
)
def test_follow_up_removes_the_cause_already_tried(engine, follow_up, lang):
    first = diagnose(engine, "full fine-tune of qwen 7b, loss goes to 0 after a few steps", [Attachment("ds_config.json", DS_FP32)])
    assert ranked_ids(first)[0] == "deepspeed-comm-dtype-fp32-loss-zero"
    history = [
        Turn("user", "loss goes to 0\n```json\n" + DS_FP32 + "\n```"),
        Turn("assistant", "Full fine-tune loss drops to 0 ... when DeepSpeed forces fp32 communication"),
    ]
    d = diagnose(engine, follow_up, history=history, top=10)
    assert d.language == lang
    ids = ranked_ids(d)
    assert ids[0] != "deepspeed-comm-dtype-fp32-loss-zero"
    demoted = next(c for c in d.causes + d.related if c.case_id == "deepspeed-comm-dtype-fp32-loss-zero")
    assert demoted.demoted and (("already tried" in demoted.demoted) if lang == "en" else ("已经尝试过" in demoted.demoted))


@pytest.mark.parametrize(
    "question",
    [
        "my ds config sets communication_data_type to fp32 and the loss goes to 0, I already trained half an epoch. what now?",
        "ds 配置里 communication_data_type 设成了 fp32，loss 变成 0 了，已经训了半个 epoch，怎么办",
    ],
)
def test_a_fix_named_before_the_already_clause_is_not_tried(engine, question):
    """'Already' says what was done from its own clause on: the setting named while describing the problem was not tried."""
    from app.diagnose import tried_statements

    (stmt,) = tried_statements(question)
    assert "communication_data_type" not in stmt
    d = diagnose(engine, question, [Attachment("ds_config.json", DS_FP32)], top=10)
    assert ranked_ids(d)[0] == "deepspeed-comm-dtype-fp32-loss-zero"
    assert not d.causes[0].demoted


def test_a_config_risk_for_another_symptom_is_set_aside(engine):
    """Full FT at lr 3e-4 is a real risk, but it does not explain an NCCL timeout during preprocessing."""
    cfg = "model_name_or_path: Qwen/Qwen2-7B-Instruct\nstage: sft\nfinetuning_type: full\nlearning_rate: 3.0e-4\ncutoff_len: 2048\ndataset: alpaca_en\n"
    q = "multi-node run hangs while the dataset is tokenized and then dies with an NCCL watchdog timeout after 30 minutes"
    d = diagnose(engine, q, [Attachment("sft.yaml", cfg)])
    assert ranked_ids(d)[0] != "qwen2-full-sft-lr-3e-4-generation-nan"
    assert "qwen2-full-sft-lr-3e-4-generation-nan" in [c.case_id for c in d.also_noticed]
    # asked about what the risk does explain, the same config makes it the cause
    d2 = diagnose(engine, "after full fine-tuning, generation fails: probability tensor contains inf, nan or element < 0", [Attachment("sft.yaml", cfg)])
    assert ranked_ids(d2)[0] == "qwen2-full-sft-lr-3e-4-generation-nan"


def test_not_confident_answers_label_nothing_high(engine):
    d = diagnose(engine, "how do I bake sourdough bread with a crispy crust?")
    assert not d.confident
    assert all(c.likelihood != "high" for c in d.related)
    assert d.summary.startswith("Not confident")
    zh = diagnose(engine, "怎么做红烧肉才好吃？")
    assert not zh.confident and zh.summary.startswith("把握不大")


def test_confident_answer_first_line_names_cause_and_fix(engine):
    d = diagnose(engine, "loss goes to 0 after a few steps, full fine-tune", [Attachment("ds_config.json", DS_FP32)])
    assert d.confident and d.causes[0].likelihood == "high"
    assert d.summary.startswith("Most likely:") and "communication" in d.summary.lower()


def test_thread_notes_are_retrieved_and_marked(engine):
    d = diagnose(engine, "Ascend 910B training hangs at the first all-reduce, then HCCL timeout")
    item = next((c for c in d.causes + d.related if c.case_id == "test-note-ascend-hccl"), None)
    assert item is not None and item.kind == "note"
    assert item.url == NOTE["url"] and "HCCL_CONNECT_TIMEOUT" in item.resolution
    zh = diagnose(engine, "昇腾 910B 上训练，第一次 all-reduce 卡住然后 HCCL 超时")
    item = next(c for c in zh.causes + zh.related if c.case_id == "test-note-ascend-hccl")
    assert "调大" in item.resolution  # a Chinese question gets the Chinese resolution


@pytest.mark.parametrize(
    ("lang", "question", "said"),
    [
        ("en", "DDP freezes at the first collective on several RTX 4090 cards (nccl-tests all_reduce_perf hangs too); "
               "the same code works on a single GPU and on A100 servers", "similar resolved thread"),
        ("zh", "多张 RTX 4090 上跑 DDP 在第一次集合通信卡住（nccl-tests 的 all_reduce_perf 也卡死），同样代码单卡正常，在 A100 服务器上也正常",
         "相似的已解决讨论"),
    ],
)
def test_a_case_gains_from_its_matching_threads_and_folds_them(engine, lang, question, said):
    from app.assess import SCORING
    from app.diagnose import assess_question, prepare

    q = prepare(engine, question)
    with_threads = assess_question(engine, q)
    without = assess_question(engine, q, scoring=SCORING.model_copy(update={"w_threads": 0.0, "fold_notes": False}))
    case = "nccl-p2p-hang-consumer-gpus"
    got = next(a for a in with_threads.ranked if a.item_id == case)
    base = next(a for a in without.ranked if a.item_id == case)
    r = got.reason("threads")
    assert r is not None and r.params["ids"] == ["test-note-4090-p2p"] and got.score == pytest.approx(base.score + r.delta) and r.delta > 0
    # unfolded, the note is ranked; folded, it is gone from the answer when its case ranks above it
    plain = [a.item_id for a in without.ranked]
    assert "test-note-4090-p2p" in plain
    folded = [a.item_id for a in with_threads.ranked]
    assert folded[0] == case and "test-note-4090-p2p" not in folded
    assert plain.index(case) > 0 or plain.index("test-note-4090-p2p") > 0
    d = diagnose(engine, question)
    top = (d.causes or d.related)[0]
    assert top.case_id == case and any(said in e and "test-note-4090-p2p" in e for e in top.evidence)
    assert d.language == lang


@pytest.mark.parametrize(
    ("question", "said"),
    [
        ("DDP freezes at the first collective on several RTX 4090 cards; one GPU works", "A common cause: 1 resolved thread"),
        ("多张 RTX 4090 上跑 DDP 在第一次集合通信卡住，单卡正常", "常见原因：知识库中有 1 个已解决讨论"),
    ],
)
def test_an_unsure_answer_ranks_by_base_rate_a_confident_one_does_not(engine, question, said):
    from app.assess import SCORING
    from app.diagnose import assess_question, prepare
    from eval.real import leave_out

    case = "nccl-p2p-hang-consumer-gpus"
    assert engine.case_threads[engine.case_index[case]] == 1  # the fixture's one linked note
    q = prepare(engine, question)
    got = assess_question(engine, q)
    off = assess_question(engine, q, scoring=SCORING.model_copy(update={"w_prior": 0.0}))
    assert not got.confident and not off.confident  # a vague report: the evidence does not decide
    a = next(x for x in got.ranked if x.item_id == case)
    b = next(x for x in off.ranked if x.item_id == case)
    r = a.reason("prior")
    assert r is not None and r.params["n"] == 1 and r.delta > 0
    assert a.score == pytest.approx(b.score + r.delta) and b.reason("prior") is None
    assert all(x.reason("prior") is None for x in got.ranked if x.item_id != case)  # no thread traced to them
    # the eval's own-thread rule: a left-out note counts for nothing, base rate included
    own = leave_out(q, [engine.doc_index["test-note-4090-p2p"]])
    assert next(x for x in assess_question(engine, own).ranked if x.item_id == case).reason("prior") is None
    # a confident answer (here: made confident by lowering the bar) keeps the order its evidence gave
    sure = SCORING.model_copy(update={"tau_conf": 0.0, "tau_cos": 0.0})
    conf = assess_question(engine, q, scoring=sure)
    assert conf.confident and all(x.reason("prior") is None for x in conf.ranked)
    # the answer says it, in the question's language
    d = diagnose(engine, question)
    top = next(x for x in d.causes + d.related if x.case_id == case)
    assert any(said in e for e in top.evidence)


def test_the_base_rate_does_not_outrank_a_trigger_on_the_users_files(engine):
    """Commonness orders causes the evidence left near-tied; a trigger that fired on the user's files is evidence."""
    import numpy as np

    from app.assess import SCORING, Reason, _base_rate, _Work

    base = np.ones(len(engine.item_ids))
    case = engine.case_index["nccl-p2p-hang-consumer-gpus"]
    w = _Work(score=base.copy(), base=base, rel=base.copy())
    _base_rate(engine, w, (), SCORING)
    assert w.score[case] > 1.0 and w.reasons[case][0].key == "prior"  # no file evidence: its linked thread counts
    other = next(i for i in range(len(engine.case_ids)) if i != case)
    w = _Work(score=base.copy(), base=base, rel=base.copy(), reasons={other: [Reason("trigger", 0.5)]})
    _base_rate(engine, w, (), SCORING)
    assert (w.score == base).all() and all(r.key != "prior" for rs in w.reasons.values() for r in rs)


def test_signal_idf_weights_rare_signals_more(engine):
    from app.assess import signal_idf

    idf = signal_idf(engine)
    assert idf["log.nccl_timeout"] >= idf.get("log.nan_loss", 0)
    assert all(0 < v <= 1 for v in idf.values())


@pytest.mark.parametrize(
    ("diff", "name", "text", "want"),
    [
        ("-fp16: true\n+bf16: true", "run.sh", "torchrun train.py --bf16 true --lr 1e-5", None),  # already has the fix
        ("-fp16: true\n+bf16: true", "run.sh", "torchrun train.py --lr 1e-5", "+--bf16"),  # no fp16 flag: no removal
        ("-fp16: true\n+bf16: true", "sft.yaml", "lr: 1e-5\nfp16: true\n", "-fp16: true    # sft.yaml:2\n+bf16: true"),
        ('-  "communication_data_type": "fp32",', "ds.json", '{\n  "communication_data_type": "fp32"\n}', '-"communication_data_type": "fp32"    # ds.json:2'),
        ('-  "communication_data_type": "fp32",', "ds.json", '{\n  "bf16": {"enabled": true}\n}', None),  # nothing to remove
    ],
)
def test_fix_diffs_follow_the_users_file(diff, name, text, want):
    assert adapt(diff, {name: text}) == want


LOG_4090 = (b"GPU 0: NVIDIA GeForce RTX 4090\n{'loss': 2.31, 'learning_rate': 1e-05, 'epoch': 0.01}\n"
            b"[E ProcessGroupNCCL.cpp:475] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, "
            b"OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800427 milliseconds before timing out.\n")


def test_the_answer_carries_its_sentences_as_keys_in_both_languages(engine):
    """The render stage words the same keys in the asker's language: en and zh answers say the same things."""
    from app.compose import words

    en = diagnose(engine, "Multi-GPU DDP on RTX 4090 cards freezes at the first all_reduce; nccl-tests all_reduce_perf hangs too",
                  attachments=[Attachment("train.log", LOG_4090)])
    zh = diagnose(engine, "多张 RTX 4090 上 DDP 第一次 all_reduce 卡住，nccl-tests 的 all_reduce_perf 也卡死",
                  attachments=[Attachment("train.log", LOG_4090)])
    for d in (en, zh):
        assert d.summary_said is not None and d.summary == words(d.summary_said, d.language)
        top = (d.causes or d.related)[0]
        assert top.case_id == "nccl-p2p-hang-consumer-gpus"
        assert len(top.reasons) == len(top.evidence) and top.reasons, top.evidence
    assert en.summary_said.key == zh.summary_said.key
    en_top, zh_top = (en.causes or en.related)[0], (zh.causes or zh.related)[0]
    assert [r.key for r in en_top.reasons] == [r.key for r in zh_top.reasons]
    assert "reason.trigger" in {r.key for r in en_top.reasons}  # the log's GPU and NCCL timeout fired the case's trigger
    assert en_top.evidence != zh_top.evidence  # the same reasons, worded for each asker
    assert en.language == "en" and zh.language == "zh"


def test_fold_keeps_one_slot_per_cause_and_gives_a_notes_slot_to_its_case(engine):
    from app.assess import Assessed, _fold

    note, case = "test-note-4090-p2p", "nccl-p2p-hang-consumer-gpus"
    assert engine.as_case(note) == case
    other = next(c for c in engine.case_ids if c != case)

    def item(iid: str, score: float) -> Assessed:
        c = engine.cases.get(iid)
        return Assessed(iid, "case" if c else "note", c, engine.notes.get(iid), score, score, 0.0, 0.0)

    above = _fold(engine, [item(note, 0.9), item(other, 0.8), item(case, 0.5)])
    assert [a.item_id for a in above] == [case, other] and above[0].score == pytest.approx(0.9)
    below = _fold(engine, [item(case, 0.9), item(other, 0.8), item(note, 0.5)])
    assert [a.item_id for a in below] == [case, other]
    alone = _fold(engine, [item(note, 0.9), item(other, 0.8)])  # its case not ranked: the note stands for it
    assert [a.item_id for a in alone] == [note, other]


def test_english_text_leans_on_word_matches_more_than_chinese():
    """The dense / BM25 shares depend on the language the question is written in (`Scoring.w_dense_en`)."""
    import numpy as np

    from app.assess import SCORING, _text_base
    from app.retrieve import Candidates

    # item 0: the best meaning match, a weak word match; item 1: the reverse
    cand = Candidates(dense=np.array([0.90, 0.86, 0.80], dtype=np.float32), lex=np.array([4.0, 8.0, 0.0], dtype=np.float32), timings={})
    zh, _, _ = _text_base(cand, "full", SCORING, "zh")
    en, _, _ = _text_base(cand, "full", SCORING, "en")
    assert SCORING.w_dense_en < SCORING.w_dense
    assert en[1] - en[0] > zh[1] - zh[0]  # the word match gains on the meaning match for English text
    assert np.allclose(_text_base(cand, "bm25", SCORING, "en")[0], _text_base(cand, "bm25", SCORING, "zh")[0])
