"""Attachments (configs, command lines, scripts, logs, trainer_state.json, code blocks in a message) -> one set of facts.

The parser is chosen by content (the file name is only a hint). Secrets are redacted before anything is read.
A file that cannot be read gives a note saying why; the others and the question are still used.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from app.facts.cmdline import looks_like_cmdline, parse_cmdline
from app.facts.logs import TOOL_ERROR, LogReader, looks_like_log, read_log, read_trainer_state
from app.facts.normalize import model_facts
from app.facts.pysnippet import looks_like_python, parse_python
from app.facts.redact import redact
from app.facts.runs import (
    RUN_KINDS,
    STREAMED_KINDS,
    RunData,
    is_tfevents,
    read_text,
    read_tfevents_att,
    remember,
    sniff,
)
from app.facts.structured import ParseError, parse_structured
from app.models import Fact, FileNote

DEFAULT_MAX_BYTES = 20 * 1024 * 1024
STREAM_LOG_MAX_BYTES = 2 * 1024 * 1024 * 1024  # logs given as a path are streamed; this only guards absurd inputs
_FENCE = re.compile(r"```([\w.+-]*)[^\n]*\n(.*?)```", re.S)
_EOS_LIKE = {"</s>", "<|endoftext|>", "<|im_end|>", "<eos>", "eos_token", "tokenizer.eos_token", "<|end_of_text|>", "<|eot_id|>", "<|end|>"}


@dataclass
class Attachment:
    """A file the user gave: its name and either its content or a path to stream it from."""

    name: str
    content: bytes | str | None = None
    path: Path | None = None

    def size(self) -> int:
        if self.path is not None:
            return self.path.stat().st_size
        if isinstance(self.content, str):
            return len(self.content.encode("utf-8"))
        return len(self.content or b"")

    def head(self, n: int = 8192) -> bytes:
        if self.path is not None:
            with self.path.open("rb") as fh:
                return fh.read(n)
        c = self.content or b""
        return (c.encode("utf-8") if isinstance(c, str) else c)[:n]

    def text(self) -> str:
        if self.path is not None:
            return self.path.read_text(encoding="utf-8", errors="replace")
        c = self.content or ""
        return c if isinstance(c, str) else c.decode("utf-8", errors="replace")

    def lines(self) -> Iterator[str]:
        if self.path is not None:
            with self.path.open("r", encoding="utf-8", errors="replace") as fh:
                yield from fh
        else:
            yield from io.StringIO(self.text())


@dataclass
class FactSet:
    facts: list[Fact] = field(default_factory=list)
    files: list[FileNote] = field(default_factory=list)
    redactions: int = 0
    redacted_texts: dict[str, str] = field(default_factory=dict)
    earlier_files: set[str] = field(default_factory=set)  # files from earlier turns of the conversation

    def by_key(self) -> dict[str, Fact]:
        out: dict[str, Fact] = {}
        for f in self.facts:
            out.setdefault(f.key, f)
        return out

    def shown(self) -> list[Fact]:
        """The facts worth showing back: one per key, no internal message dump."""
        return [f for f in self.by_key().values() if f.key != "log.message"]


def is_binary(head: bytes) -> bool:
    """A file we refuse as binary. A TensorBoard event file is binary but read (recognised by its first record)."""
    if is_tfevents(head):
        return False
    if b"\x00" in head:
        return True
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as e:
        return e.start < len(head) - 4  # a multi-byte char cut at the end of the sample is fine
    return False


def detect_kind(name: str, text: str) -> str:
    """One of: trainer_state, a run export (runs.RUN_KINDS), json, log, cmdline, python, yaml, unknown."""
    s = text.lstrip()
    low = name.lower()
    if s.startswith("{") or s.startswith("["):
        if '"log_history"' in s[:200000]:
            return "trainer_state"
    run_kind = sniff(s[:200000])
    if run_kind is not None:
        return run_kind
    is_log_name = low.endswith((".log", ".txt", ".out", ".err", ".jsonl"))
    if s.startswith("{") or s.startswith("["):
        # a log named as one whose first line is a JSON record (JSONL metrics, then a traceback) stays a log:
        # only one whole JSON document makes such a file JSON
        if s.startswith("{") and not s.startswith("{'") and (low.endswith(".json") or (_json_strict(s) if is_log_name else _json_ok(s))):
            return "json"
    if is_log_name and looks_like_log(s):
        return "log"
    if low.endswith(".py") or (looks_like_python(s) and _py_ok(s)):
        return "python"
    if low.endswith(".sh") or (looks_like_cmdline(s) and not re.search(r"^\s*[\w.\-]+\s*:\s", s, re.M)):
        return "cmdline"
    if _ENV_DUMP.search(s[:20000]) and not low.endswith((".yaml", ".yml")):
        return "log"  # `transformers-cli env` output or a pip freeze: the log reader takes the versions
    if TOOL_ERROR.search(s[:20000]) and not low.endswith((".yaml", ".yml")):
        return "log"  # `sbatch: error: ...` is a tool's message (and not valid YAML), not a key-value config
    if low.endswith((".yaml", ".yml")) or _mostly_key_values(s):
        return "yaml"
    if looks_like_log(s):
        return "log"
    if re.search(r"^\s*[\w.\-]+\s*:\s*\S", s, re.M):
        return "yaml"
    if s.startswith("{"):
        return "json"
    return "unknown"


_ENV_DUMP = re.compile(
    r"^\s*-?\s*`?(transformers|torch|pytorch|deepspeed|peft|trl|accelerate|flash[-_]attn|vllm|bitsandbytes)`?"
    r"( version)?(\s*\(gpu\?\))?\s*(:|==)\s*v?\d+\.\d+",
    re.I | re.M,
)


def _mostly_key_values(s: str) -> bool:
    lines = [ln for ln in s.splitlines()[:400] if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        return False
    kv = sum(1 for ln in lines if re.match(r"^\s*(- )?[\w.\-]+\s*:(\s|$)", ln))
    return kv >= 0.6 * len(lines) and not any(ln.lstrip().startswith("{") for ln in lines)


def _json_strict(s: str) -> bool:
    try:
        json.loads(s)
        return True
    except (ValueError, RecursionError):
        return False


def _json_ok(s: str) -> bool:
    """Whole JSON, or at least starts like a JSON object (a cut-off or broken one still reads as JSON, with a note)."""
    return _json_strict(s) or bool(re.match(r'^\{\s*"', s))


def _py_ok(s: str) -> bool:
    import ast

    try:
        ast.parse(s)
        return True
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return bool(re.search(r"\w+(Config|Arguments)\(|from_pretrained\(", s))


def code_blocks(message: str) -> tuple[str, list[Attachment]]:
    """Fenced code blocks pasted in a chat message become attachments; the prose is returned without them."""
    atts = []
    for i, m in enumerate(_FENCE.finditer(message or ""), 1):
        hint = m.group(1).lower()
        ext = {"json": ".json", "yaml": ".yaml", "yml": ".yaml", "python": ".py", "py": ".py", "bash": ".sh", "sh": ".sh", "shell": ".sh", "log": ".log"}.get(hint, "")
        atts.append(Attachment(name=f"message-block-{i}{ext}", content=m.group(2)))
    prose = _FENCE.sub(" ", message or "").strip()
    return prose, atts


def read_attachments(atts: list[Attachment], question: str = "", max_bytes: int = DEFAULT_MAX_BYTES) -> FactSet:
    fs = FactSet()
    for att in atts:
        _read_one(att, fs, max_bytes)
    inline = re.findall(r"(?:^|\s)(--[a-zA-Z][\w\-]*(?:[= ][^\s-][^\s]*)?)", question or "")
    if inline:
        fs.facts += [f.model_copy(update={"kind": "prose"}) for f in parse_cmdline(" ".join(inline), "question")]
    derive(fs)
    return fs


def _read_one(att: Attachment, fs: FactSet, max_bytes: int) -> None:
    name = att.name or "attachment"
    try:
        size = att.size()
        head = att.head()
    except OSError as e:
        fs.files.append(FileNote(file=name, kind="unreadable", ok=False, message=f"{name}: cannot read the file ({e.strerror or e}).", message_zh=f"{name}：无法读取该文件（{e.strerror or e}）。"))
        return
    if size == 0:
        fs.files.append(FileNote(file=name, kind="empty", ok=False, message=f"{name}: the file is empty.", message_zh=f"{name}：文件是空的。"))
        return
    if is_tfevents(head):
        if att.path is not None and size > STREAM_LOG_MAX_BYTES:
            fs.files.append(FileNote(file=name, kind="too-large", ok=False, message=f"{name}: {size / 1e9:.1f} GB is over the {STREAM_LOG_MAX_BYTES / 1e9:g} GB limit for event files; it was skipped.", message_zh=f"{name}：{size / 1e9:.1f} GB 超过事件文件 {STREAM_LOG_MAX_BYTES / 1e9:g} GB 的上限，已跳过。"))
            return
        _read_run(att, fs, read_tfevents_att(att))
        return
    if is_binary(head):
        fs.files.append(FileNote(file=name, kind="binary", ok=False, message=f"{name}: looks like a binary file, not a config, a log or a TensorBoard event file; it was skipped.", message_zh=f"{name}：看起来是二进制文件，不是配置、日志或 TensorBoard 事件文件，已跳过。"))
        return
    streaming = att.path is not None and size > max_bytes
    if streaming:
        sample = head.decode("utf-8", errors="replace")
        run_kind = sniff(sample)
        if run_kind in STREAMED_KINDS and size <= STREAM_LOG_MAX_BYTES:
            _read_run(att, fs, read_text(run_kind, None, _redacted_lines(att), name))
            return
        if not looks_like_log(sample) or size > STREAM_LOG_MAX_BYTES:
            fs.files.append(FileNote(file=name, kind="too-large", ok=False, message=f"{name}: {size / 1e6:.1f} MB is over the {max_bytes / 1e6:g} MB limit for configs; it was skipped.", message_zh=f"{name}：{size / 1e6:.1f} MB 超过配置文件 {max_bytes / 1e6:g} MB 的上限，已跳过。"))
            return
        reader = LogReader(name)  # streamed logs: origin "log"
        for n, line in enumerate(_redacted_lines(att), 1):
            reader.feed(line, n)
        data = RunData.of(reader, "log", reader.n)
        remember(att, data)  # the chart of this file reuses this read
        fs.facts += [f.model_copy(update={"kind": "log"}) for f in data.facts]
        fs.files.append(FileNote(file=name, kind="log", message=f"{name}: streamed {size / 1e6:.1f} MB log", message_zh=f"{name}：已流式读取 {size / 1e6:.1f} MB 日志"))
        return
    if size > max_bytes:
        fs.files.append(FileNote(file=name, kind="too-large", ok=False, message=f"{name}: {size / 1e6:.1f} MB is over the {max_bytes / 1e6:g} MB upload limit; it was skipped.", message_zh=f"{name}：{size / 1e6:.1f} MB 超过 {max_bytes / 1e6:g} MB 的上传上限，已跳过。"))
        return
    text, n_red = redact(att.text())
    fs.redactions += n_red
    fs.redacted_texts[name] = text
    kind = detect_kind(name, text)
    if kind in RUN_KINDS:
        _read_run(att, fs, read_text(kind, text, None, name), n_red)
        return
    try:
        if kind == "trainer_state":
            try:
                data = json.loads(text)
            except json.JSONDecodeError as e:
                raise ParseError(f"invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}", e.lineno, e.colno) from e
            except RecursionError as e:
                raise ParseError("the JSON is nested too deeply to read", 1, 1) from e
            except ValueError as e:  # an integer past Python's 4,300-digit limit
                raise ParseError(f"the JSON holds a number too long to read ({str(e).split(':')[0]})", 1, 1) from e
            facts = read_trainer_state(text, data, name)
        elif kind in ("json", "yaml"):
            facts, data = parse_structured(text, name, kind)
            if kind == "yaml" and not isinstance(data, dict):
                if looks_like_log(text):
                    kind, facts = "log", read_log(text.splitlines(), name)
                else:
                    kind, facts = "unknown", []
        elif kind == "log":
            reader = LogReader(name)
            for n, line in enumerate(text.splitlines(), 1):
                reader.feed(line, n)
            data = RunData.of(reader, "log", reader.n)
            remember(att, data)  # the chart of this file reuses this read
            facts = data.facts
        elif kind == "cmdline":
            facts = parse_cmdline(text, name)
        elif kind == "python":
            facts = parse_python(text, name)
        else:
            facts = []
    except ParseError as e:
        fs.files.append(FileNote(file=name, kind=kind, ok=False, message=f"{name}: {e} — the rest of the question was still used.", message_zh=f"{name}：第 {e.line} 行第 {e.col} 列解析失败（{e}），问题的其余部分仍已使用。"))
        return
    except SyntaxError as e:
        fs.files.append(FileNote(file=name, kind=kind, ok=False, message=f"{name}: could not read this Python at line {e.lineno}: {e.msg}.", message_zh=f"{name}：第 {e.lineno} 行的 Python 无法解析（{e.msg}）。"))
        return
    if kind == "unknown" or not facts:
        what = "an unknown format" if kind == "unknown" else f"a {kind} with no settings or log lines trainfix knows"
        what_zh = "无法识别的格式" if kind == "unknown" else f"{kind} 文件中没有 trainfix 认识的配置项或日志行"
        fs.files.append(FileNote(file=name, kind=kind, ok=kind != "unknown", message=f"{name}: {what}; nothing was read from it.", message_zh=f"{name}：{what_zh}，没有从中读到任何内容。"))
        return
    okind, fw = classify_origin(kind, text)
    facts = [f.model_copy(update={"kind": f.kind or okind, "framework": f.framework or fw}) for f in facts]
    fs.facts += facts
    note = f"{name}: read as {kind}, {len({f.key for f in facts if f.key != 'log.message'})} facts"
    if n_red:
        note += f", {n_red} secret(s) redacted"
    note_zh = f"{name}：按 {kind} 读取，{len({f.key for f in facts if f.key != 'log.message'})} 项信息" + (f"，遮蔽了 {n_red} 处密钥" if n_red else "")
    fs.files.append(FileNote(file=name, kind=kind, message=note, message_zh=note_zh))


def _redacted_lines(att: Attachment) -> Iterator[str]:
    """A streamed file's lines, with the lines that may hold a secret redacted (the rest pass untouched, for speed)."""
    for line in att.lines():
        yield redact(line)[0] if ("token" in line.lower() or "key" in line.lower() or "hf_" in line) else line


_RUN_LABEL = {
    "tensorboard": ("TensorBoard event file", "TensorBoard 事件文件"),
    "wandb_csv": ("W&B / metrics CSV export", "W&B / 指标 CSV 导出"),
    "wandb_history": ("W&B run history (JSON Lines)", "W&B 运行历史（JSON Lines）"),
    "wandb_json": ("W&B run history (JSON)", "W&B 运行历史（JSON）"),
    "mlflow_csv": ("MLflow metric history (CSV)", "MLflow 指标历史（CSV）"),
    "mlflow_json": ("MLflow metric history (JSON)", "MLflow 指标历史（JSON）"),
    "trainer_log": ("LLaMA-Factory trainer_log.jsonl", "LLaMA-Factory trainer_log.jsonl"),
}


def _read_run(att: Attachment, fs: FactSet, data: RunData, n_red: int = 0) -> None:
    """A run's history (TensorBoard, W&B, MLflow): its facts come from the log reader's detectors, origin "log"."""
    name = att.name or "attachment"
    remember(att, data)  # the chart of this file reuses this read
    en, zh = _RUN_LABEL.get(data.kind, (data.kind, data.kind))
    facts = [f.model_copy(update={"kind": "log"}) for f in data.facts]
    fs.facts += facts
    if not data.series:
        why, why_zh = data.problem or ("no loss, grad_norm, learning rate, reward, KL or entropy series in it", "其中没有 loss、grad_norm、学习率、reward、KL 或 entropy 序列")
        fs.files.append(FileNote(file=name, kind=data.kind, ok=data.problem is None, message=f"{name}: a {en}, but {why}; nothing was read from it.", message_zh=f"{name}：{zh}，但{why_zh}，没有从中读到任何内容。"))
        return
    names = ", ".join(sorted(data.series))
    nkeys = len({f.key for f in facts if f.key != "log.message"})
    note = f"{name}: read as a {en}, {data.rows} records, series {names}, {nkeys} facts"
    note_zh = f"{name}：按{zh}读取，{data.rows} 条记录，序列 {names}，{nkeys} 项信息"
    if n_red:
        note += f", {n_red} secret(s) redacted"
        note_zh += f"，遮蔽了 {n_red} 处密钥"
    if data.problem:
        note += f"; {data.problem[0]}"
        note_zh += f"；{data.problem[1]}"
    fs.files.append(FileNote(file=name, kind=data.kind, message=note, message_zh=note_zh))


_SELF_BUILT = (
    ("openrlhf", re.compile(r"openrlhf", re.I)),
    ("verl", re.compile(r"\bverl\b|actor_rollout_ref", re.I)),
    ("easyr1", re.compile(r"easyr1", re.I)),
    ("ms-swift", re.compile(r"(^|\s)swift\s+(sft|rlhf|pt)\b|\bms-swift\b", re.I | re.M)),
    ("llamafactory", re.compile(r"llamafactory-cli|llama-factory|\bsrc/train(_bash)?\.py\b", re.I)),
    ("axolotl", re.compile(r"\baxolotl\b", re.I)),
    ("megatron", re.compile(r"pretrain_gpt\.py|megatron", re.I)),
)


def classify_origin(kind: str, text: str) -> tuple[str, str]:
    """The typed origin of a file's facts: (file kind, framework). Scoped triggers read these, not file names."""
    head = text[:200000]
    fw = next((name for name, rx in _SELF_BUILT if rx.search(head)), "")
    if kind == "json":
        if re.search(r'"(zero_optimization|train_micro_batch_size_per_gpu|communication_data_type|zero_allow_untested_optimizer)"', head):
            return "deepspeed_json", fw or "deepspeed"
        if re.search(r'"(per_device_train_batch_size|learning_rate|num_train_epochs|output_dir)"', head):
            return "hf_args_json", fw or "transformers"
        return "json", fw
    if kind == "yaml":
        if re.search(r"^\s*actor_rollout_ref\s*:", head, re.M):
            return "verl_yaml", "verl"
        if re.search(r"^\s*(finetuning_type|template|stage)\s*:", head, re.M) and re.search(r"^\s*(finetuning_type|cutoff_len|dataset)\s*:", head, re.M):
            return "llamafactory_yaml", "llamafactory"
        if re.search(r"^\s*base_model\s*:", head, re.M) and re.search(r"^\s*(datasets|sample_packing|micro_batch_size)\s*:", head, re.M):
            return "axolotl_yaml", "axolotl"
        if re.search(r"^\s*(compute_environment|distributed_type)\s*:", head, re.M):
            return "accelerate_yaml", "accelerate"
        return "yaml", fw
    if kind == "trainer_state":
        return "trainer_state", "transformers"
    if kind == "log":
        return "log", fw
    return kind, fw


def derive(fs: FactSet) -> None:
    """Facts implied by others: model family and size from the name, LoRA/QLoRA, DeepSpeed in use, pad = eos."""
    have = fs.by_key()
    extra: list[Fact] = []
    if "model.name" in have:
        extra += [f for f in model_facts(have["model.name"]) if f.key not in have]
    ds_keys = [f for f in fs.facts if f.key.startswith("deepspeed.") and f.key != "deepspeed.enabled"]
    if ds_keys and "deepspeed.enabled" not in have:
        extra.append(ds_keys[0].model_copy(update={"key": "deepspeed.enabled", "value": True}))
    ft = have.get("train.finetuning_type")
    q4 = have.get("model.load_in_4bit")
    if ft is None and "lora.r" in have:
        ft = have["lora.r"].model_copy(update={"key": "train.finetuning_type", "value": "lora"})
        extra.append(ft)
    if ft is not None and ft.value == "lora" and q4 is not None and q4.value is True:
        fs.facts = [f for f in fs.facts if f.key != "train.finetuning_type"]
        extra.append(ft.model_copy(update={"value": "qlora"}))
    lr = have.get("train.learning_rate")
    if ft is None and lr is not None and lr.file in fs.redacted_texts and not re.search(r"lora|peft|adapter|qlora|prefix_tuning|p_tuning|freeze", fs.redacted_texts[lr.file], re.I):
        # a training config or launch line with no adapter settings at all trains every weight
        extra.append(lr.model_copy(update={"key": "train.finetuning_type", "value": "full", "text": lr.text + "  (no LoRA/PEFT settings in this file: full fine-tuning)"}))
    pad = have.get("tokenizer.pad_token")
    if pad is not None and "tokenizer.pad_is_eos" not in have and str(pad.value).strip() in _EOS_LIKE:
        extra.append(pad.model_copy(update={"key": "tokenizer.pad_is_eos", "value": True}))
    prec = have.get("precision")
    td = have.get("model.torch_dtype")
    kinds = {n.file: n.kind for n in fs.files}
    if prec is None and td is not None and td.value in ("bfloat16", "float16") and kinds.get(td.file) != "python":
        # in a training config, `torch_dtype: bfloat16` is the run's precision; in a script it may be inference only
        extra.append(td.model_copy(update={"key": "precision", "value": "bf16" if td.value == "bfloat16" else "fp16"}))
    fs.facts += extra


def read_files(paths: list[Path], question: str = "", max_bytes: int = DEFAULT_MAX_BYTES) -> FactSet:
    """CLI helper: attachments from paths (logs bigger than the limit are streamed)."""
    return read_attachments([Attachment(name=p.name, path=p) for p in paths], question, max_bytes)
