"""Training logs and trainer_state.json -> metric series -> symptom facts (NaN, loss to 0, spikes, divergence, ...).

Logs are streamed line by line and series are kept in bounded arrays, so a 50 MB log costs a few MB.
"""

from __future__ import annotations

import json
import math
import re
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from statistics import median

from app.models import Fact

_NUM = r"([-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+)|nan|inf|-inf|NaN|Inf|-Inf|Infinity)"
_DICT_KV = re.compile(r"['\"]([\w/\-\.]+)['\"]\s*:\s*(?:tensor\()?" + _NUM)
_COLON_KV = re.compile(r"(?:^|[\s|,\-\[])([a-z][\w/\-\.]*?)(?:\s*[:=]\s*|\s+)" + _NUM + r"(?=$|[\s,|\]])", re.I)
_STEP = re.compile(r"\b(?:global_step|step|iter(?:ation)?)\s*[:=]?\s*(\d+)", re.I)
_OVERFLOW = re.compile(r"overflow.*?(?:attempted loss scale|loss scale(?:r)?)[:\s]*(?:\d+\s*,?\s*)?.*?(?:reducing (?:loss scale )?to|reducing to)\s*([\d.e+]+)", re.I)
_OVERFLOW_ANY = re.compile(r"\boverflow\b.*\bskip", re.I)
_SCALE_MIN = re.compile(r"loss scale already at minimum|cannot decrease scale anymore", re.I)
_PROB = re.compile(r"probability tensor contains either", re.I)
_NCCL = re.compile(r"watchdog caught collective operation timeout|nccl.*timeout|timed out.*(allreduce|all_reduce|broadcast|barrier)|ProcessGroupNCCL.*timeout", re.I)
_OOM = re.compile(r"out of memory|OutOfMemoryError", re.I)
_NAN_MSG = re.compile(r"\bloss\b[^\n]{0,20}\b(is|=|:|became|becomes)\s*(nan|inf)\b|\bnan loss\b|detected (nan|inf)", re.I)
_ERRORISH = re.compile(
    r"error|exception|warn|traceback|nan|inf\b|overflow|timeout|timed out|killed|assert|incompatible|newly initialized|not initialized|"
    r"trainable params|deprecat|unused|ignored|mismatch|skipping|not supported|fall(ing)? back",
)  # searched in the lower-cased line: a case-insensitive search of this alternation is ten times slower
_VERSION = [
    ("env.transformers_version", re.compile(r"\btransformers(?:`)?\s*(?:version)?\s*(?:==|:|\s)\s*v?(\d+\.\d+(?:\.\d+)?)", re.I)),
    ("env.torch_version", re.compile(r"\b(?:torch|pytorch)(?:`)?\s*(?:version)?(?:\s*\(gpu\?\))?\s*(?:==|:|\s)\s*v?(\d+\.\d+(?:\.\d+)?)", re.I)),
    ("env.deepspeed_version", re.compile(r"\bdeepspeed(?:`)?\s*(?:info:\s*)?(?:version)?\s*(?:==|:|=|\s)\s*v?(\d+\.\d+(?:\.\d+)?)", re.I)),
    ("env.trl_version", re.compile(r"\btrl(?:`)?\s*(?:version)?\s*(?:==|:|\s)\s*v?(\d+\.\d+(?:\.\d+)?)", re.I)),
    ("env.peft_version", re.compile(r"\bpeft(?:`)?\s*(?:version)?\s*(?:==|:|\s)\s*v?(\d+\.\d+(?:\.\d+)?)", re.I)),
    ("env.accelerate_version", re.compile(r"\baccelerate(?:`)?\s*(?:version)?\s*(?:==|:|\s)\s*v?(\d+\.\d+(?:\.\d+)?)", re.I)),
    ("env.flash_attn_version", re.compile(r"\bflash[-_]attn(?:`)?\s*(?:version)?\s*(?:==|:|\s)\s*v?(\d+\.\d+(?:\.\d+)?)", re.I)),
    ("env.vllm_version", re.compile(r"\bvllm(?:`)?\s*(?:version)?\s*(?:==|:|\s)\s*v?(\d+\.\d+(?:\.\d+)?)", re.I)),
    ("env.bitsandbytes_version", re.compile(r"\bbitsandbytes(?:`)?\s*(?:version)?\s*(?:==|:|\s)\s*v?(\d+\.\d+(?:\.\d+)?)", re.I)),
]
_VERSION_WORDS = re.compile(r"transformers|torch|deepspeed|trl|peft|accelerate|flash|vllm|bitsandbytes|gpu|nvidia|cuda|device")  # one cheap guard
_GPU = re.compile(r"\b(v100|p100|p40|t4|a100|a800|h100|h800|h20|l40s?|2080(?: ?ti)?|3090|4090|a10g?|a6000)\b|(910b)", re.I)

MAX_POINTS = 20000  # per series; beyond this the series is decimated (every other point dropped)

# metric name -> series name
_SERIES = {
    "loss": "loss", "train_loss": "loss", "train/loss": "loss", "lm loss": "loss", "lm_loss": "loss",
    "grad_norm": "grad_norm", "train/grad_norm": "grad_norm", "grad norm": "grad_norm", "gradnorm": "grad_norm",
    "actor/grad_norm": "grad_norm",
    "learning_rate": "lr", "lr": "lr", "train/learning_rate": "lr", "actor/lr": "lr",
    "loss_scale": "loss_scale", "loss scale": "loss_scale", "scale": "loss_scale",
    "eval_loss": "eval_loss", "eval/loss": "eval_loss",
    "kl": "kl", "objective/kl": "kl", "actor/kl_loss": "kl", "actor/ppo_kl": "kl", "train/kl": "kl", "policy/approxkl_avg": "kl",
    "entropy": "entropy", "actor/entropy": "entropy", "actor/entropy_loss": "entropy", "policy/entropy_avg": "entropy", "objective/entropy": "entropy",
    "rewards/accuracies": "reward_acc", "train/rewards/accuracies": "reward_acc",
    "actor/pg_loss": "pg_loss", "policy_loss": "pg_loss", "pg_loss": "pg_loss",
    "reward": "reward", "critic/score/mean": "reward", "rewards/mean": "reward", "train/reward": "reward",
    "response_length/mean": "resp_len", "completion_length": "resp_len", "train/completion_length": "resp_len",
}


def _f(s: str) -> float:
    try:
        return float(s)
    except ValueError:
        low = s.lower()
        if "nan" in low:
            return math.nan
        return -math.inf if low.startswith("-") else math.inf


_INF = math.inf


def _wins(new: float, old: float) -> bool:
    """Which point stands for a bucket of a decimated series: the first non-finite one, else the largest."""
    if not math.isfinite(old):
        return False
    return not math.isfinite(new) or new > old


@dataclass
class Series:
    """A metric's points, at most MAX_POINTS: past that, buckets of 2, 4, 8 ... points keep one point each.

    The point kept for a bucket is its NaN/inf or its largest value, so a one-step spike or the first NaN of a
    million-step run is still in the series (the chart and the spike detectors see it). Buckets are even in
    size across the run, so old and recent parts of a long log have the same density.
    """

    steps: array = field(default_factory=lambda: array("d"))
    vals: array = field(default_factory=lambda: array("d"))
    lines: array = field(default_factory=lambda: array("l"))
    stride: int = 1  # points per bucket
    _filled: int = 0  # points already in the last (open) bucket

    def add(self, step: float, v: float, line: int) -> bool:
        """Add a point; False when it was not kept (its bucket already holds a larger value or a NaN)."""
        f = self._filled
        if f:  # the open bucket's point is the last one: a winner replaces it (the hot path of a long run)
            f += 1
            self._filled = 0 if f == self.stride else f
            last = self.vals[-1]
            if -_INF < last < _INF and not (-_INF < v <= last):  # = _wins(v, last), inlined
                self.steps[-1], self.vals[-1], self.lines[-1] = step, v, line
                return True
            return False
        if len(self.vals) >= MAX_POINTS:
            self._halve()
        self.steps.append(step)
        self.vals.append(v)
        self.lines.append(line)
        self._filled = 1 % self.stride
        return True

    def _halve(self) -> None:
        st, vs, ln = self.steps, self.vals, self.lines
        keep = [i if not _wins(vs[i + 1], vs[i]) else i + 1 for i in range(0, len(vs) - 1, 2)]
        if len(vs) % 2:
            keep.append(len(vs) - 1)
        self.steps = array("d", [st[i] for i in keep])
        self.vals = array("d", [vs[i] for i in keep])
        self.lines = array("l", [ln[i] for i in keep])
        self.stride *= 2


class LogReader:
    """Feed lines; then `facts()` gives the symptoms and settings found."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.series: dict[str, Series] = {}
        self.first_bad: dict[str, tuple[float, int, str]] = {}
        self.first_bad_val: dict[str, float] = {}  # the first non-finite value itself (NaN or inf)
        self.overflows = 0
        self.min_scale = math.inf
        self.scale_min_line: tuple[int, str] | None = None
        self.flags: dict[str, tuple[int, str]] = {}
        self.versions: dict[str, tuple[str, int, str]] = {}
        self.messages: list[str] = []
        self._follow = 0
        self.ordinal = 0
        self.line_texts: dict[int, str] = {}
        self._prune_at = 3 * MAX_POINTS
        self.n = 0

    def feed(self, line: str, n: int) -> None:
        self.n = n
        s = line.rstrip("\n")
        if len(s) > 4000:
            s = s[:4000]
        low = s.lower()
        # cheap substring guards first: a 50 MB log is mostly metric lines that need none of these regexes
        if len(self.versions) < len(_VERSION) + 1 and ("version" in low or "==" in low or ": " in low) and _VERSION_WORDS.search(low):
            for key, rx in _VERSION:
                if key not in self.versions:
                    m = rx.search(s)
                    if m:
                        self.versions[key] = (m.group(1), n, s.strip())
            if "env.gpu" not in self.versions and ("gpu" in low or "nvidia" in low or "cuda" in low or "device" in low):
                m = _GPU.search(s)
                if m:
                    self.versions["env.gpu"] = ((m.group(1) or m.group(2)).lower(), n, s.strip())
        if "overflow" in low:
            m = _OVERFLOW.search(s)
            if m or _OVERFLOW_ANY.search(s):
                self.overflows += 1
                if m:
                    sc = _f(m.group(1))
                    if sc < self.min_scale:
                        self.min_scale = sc
                        self.scale_min_line = (n, s.strip())
                self.flags.setdefault("overflow", (n, s.strip()))
        if "scale" in low and _SCALE_MIN.search(s):
            self.flags.setdefault("scale_at_min", (n, s.strip()))
        if "probability" in low and _PROB.search(s):
            self.flags.setdefault("prob", (n, s.strip()))
        if ("nccl" in low or "time" in low) and _NCCL.search(s):
            self.flags.setdefault("nccl", (n, s.strip()))
        if "memory" in low and _OOM.search(s):
            self.flags.setdefault("oom", (n, s.strip()))
        if ("nan" in low or "inf" in low) and _NAN_MSG.search(s):
            self.flags.setdefault("nan_msg", (n, s.strip()))
        if len(self.messages) < 60 and ("{" not in s[:2] or "nan" in low or "inf" in low):
            if _ERRORISH.search(low):
                self.messages.append(low.strip()[:300])
                self._follow = 3
            elif self._follow > 0 and low.strip():
                self.messages.append(low.strip()[:300])  # continuation lines of an error (e.g. "size mismatch for ...")
                self._follow -= 1
        pairs = _DICT_KV.findall(s)
        if not pairs and ("loss" in low or "grad" in low or "kl" in low or "reward" in low or "entropy" in low):
            pairs = _COLON_KV.findall(s)
        if not pairs:
            return
        self.ordinal += 1
        step_m = _STEP.search(s)
        step = float(step_m.group(1)) if step_m else float(self.ordinal)
        text = None
        for name, val in pairs:
            ser = _SERIES.get(name.lower().strip())
            if ser is None:
                continue
            if text is None:
                text = s.strip()[:300]
            self.point(ser, step, _f(val), n, text)

    def point(self, ser: str, step: float, v: float, n: int, text: str | Callable[[], str]) -> None:
        """One value of series `ser` at `step`, read from line (or record) `n` whose text is kept while the point is.

        Every reader (text logs, trainer_state, TensorBoard, W&B / MLflow exports) feeds points through here, so
        they all get the same bounded series and the same detectors. `text` may be a function, called only when
        the point is kept (most points of a long run are not, and formatting them all would cost more than the read).
        """
        s = self.series.get(ser)
        if s is None:
            s = self.series[ser] = Series()
        bad = not (-_INF < v < _INF) and ser not in self.first_bad  # NaN fails both comparisons
        if (s.add(step, v, n) or bad) and n not in self.line_texts:
            self.line_texts[n] = text if isinstance(text, str) else text()
        if bad:
            self.first_bad[ser] = (step, n, self.line_texts[n])
            self.first_bad_val.setdefault(ser, v)
        if len(self.line_texts) > self._prune_at:
            self._prune()

    def _prune(self) -> None:
        """Keep the text of only the lines still in a (decimated) series, so memory stays bounded."""
        keep: set[int] = set()
        for ser in self.series.values():
            keep.update(ser.lines)
        keep.update(n for _, n, _ in self.first_bad.values())
        self.line_texts = {k: v for k, v in self.line_texts.items() if k in keep}
        self._prune_at = max(3 * MAX_POINTS, 2 * len(self.line_texts))  # many series: never prune on every point

    def feed_records(self, records: list[dict], line_of: dict[int, int]) -> None:
        """trainer_state.json log_history entries."""
        for i, rec in enumerate(records):
            if not isinstance(rec, dict):
                continue
            try:
                step = float(rec.get("step", i + 1))
            except (TypeError, ValueError, OverflowError):
                step = float(i + 1)  # a step that is not a number: the entry's position stands in
            n = line_of.get(i, 0)
            text = json.dumps(rec)[:300]
            for name, val in rec.items():
                ser = _SERIES.get(str(name).lower())
                if ser is None or isinstance(val, bool):
                    continue
                try:
                    v = float(val) if not isinstance(val, str) else _f(val)
                except (TypeError, ValueError, OverflowError):
                    continue
                self.point(ser, step, v, n, text)

    # ---------------------------------------------------------------- detectors
    def _fact(self, key: str, value, line: int, text: str | None = None) -> Fact:
        return Fact(key=key, value=value, file=self.file, line=line, text=(text if text is not None else self.line_texts.get(line, "")))

    def facts(self) -> list[Fact]:
        out: list[Fact] = []
        for key, (v, n, t) in self.versions.items():
            out.append(self._fact(key, v, n, t))
        if "loss" in self.first_bad:
            st, n, t = self.first_bad["loss"]
            v = self.first_bad_val.get("loss", math.nan)
            out.append(self._fact("log.nan_loss" if math.isnan(v) else "log.inf_loss", st, n, t))
        elif "nan_msg" in self.flags:
            n, t = self.flags["nan_msg"]
            out.append(self._fact("log.nan_loss", 0, n, t))
        if "grad_norm" in self.first_bad:
            st, n, t = self.first_bad["grad_norm"]
            out.append(self._fact("log.nan_grad_norm", st, n, t))
        if "eval_loss" in self.first_bad and "loss" not in self.first_bad:
            st, n, t = self.first_bad["eval_loss"]
            out.append(self._fact("log.eval_loss_nan", True, n, t))
        loss = self.series.get("loss")
        if loss is not None and len(loss.vals) >= 2:
            out += self._loss_facts(loss)
        gn = self.series.get("grad_norm")
        if gn is not None and len(gn.vals) >= 2:
            out += self._grad_facts(gn)
        lr = self.series.get("lr")
        if lr is not None and len(lr.vals) >= 3:
            zero_after = [i for i in range(1, len(lr.vals)) if lr.vals[i] == 0.0]
            if zero_after and max(lr.vals) > 0 and len(zero_after) >= 2:
                i = zero_after[0]
                out.append(self._fact("log.lr_zero", lr.steps[i], lr.lines[i]))
            elif all(v == 0.0 for v in lr.vals):
                out.append(self._fact("log.lr_zero", lr.steps[0], lr.lines[0]))
        if self.overflows:
            n, t = self.flags["overflow"]
            out.append(self._fact("log.overflow_count", float(self.overflows), n, t))
            if math.isfinite(self.min_scale):
                ln, tx = self.scale_min_line or (n, t)
                out.append(self._fact("log.loss_scale_min", self.min_scale, ln, tx))
        if "scale_at_min" in self.flags or (self.overflows >= 3 and self.min_scale <= 1.0):
            n, t = self.flags.get("scale_at_min") or self.scale_min_line or self.flags["overflow"]
            out.append(self._fact("log.loss_scale_at_minimum", True, n, t))
        for flag, key in (("prob", "log.prob_tensor_error"), ("nccl", "log.nccl_timeout"), ("oom", "log.oom")):
            if flag in self.flags:
                n, t = self.flags[flag]
                out.append(self._fact(key, True, n, t))
        out += self._rl_facts()
        if self.messages:
            out.append(Fact(key="log.message", value="\n".join(self.messages), file=self.file, line=0, text=""))
        return out

    def _loss_facts(self, s: Series) -> list[Fact]:
        out: list[Fact] = []
        vals = list(s.vals)
        fin = [v for v in vals if math.isfinite(v)]
        if not fin:
            return out
        # collapse to ~0 and staying there
        for i, v in enumerate(vals):
            if math.isfinite(v) and abs(v) <= 1e-4 and max(fin[: max(i, 1)]) > 0.05:
                rest = [x for x in vals[i:] if math.isfinite(x)]
                if rest and max(abs(x) for x in rest) <= 1e-3:
                    out.append(self._fact("log.loss_zero", s.steps[i], s.lines[i]))
                break
        else:
            if len(fin) >= 2 and all(abs(v) <= 1e-4 for v in fin):
                out.append(self._fact("log.loss_zero", s.steps[0], s.lines[0]))
        if len(fin) >= 5 and max(fin) - min(fin) < 1e-6:
            out.append(self._fact("log.loss_flat", float(len(fin)), s.lines[0]))
        med = median(fin)
        if len(fin) >= 3 and med > 5:
            out.append(self._fact("log.loss_high", med, s.lines[0]))
        if len(fin) >= 5 and sum(1 for v in fin if abs(v - 0.6931) < 0.01) >= 0.8 * len(fin):
            out.append(self._fact("log.dpo_loss_stuck", float(len(fin)), s.lines[0]))
        # spike: a point far above the median of the previous window
        for i in range(5, len(vals)):
            v = vals[i]
            win = [x for x in vals[max(0, i - 20) : i] if math.isfinite(x)]
            if not math.isfinite(v) or len(win) < 4:
                continue
            m = median(win)
            if v > 2.5 * m + 0.5 and v - m > 1.0:
                out.append(self._fact("log.loss_spike", s.steps[i], s.lines[i]))
                break
        # sustained divergence: the tail sits well above the best level reached earlier and keeps rising
        if len(fin) >= 8:
            k = len(fin) // 3
            head_min = min(fin[: 2 * k])
            tail = fin[-k:]
            if median(tail) > 1.5 * head_min + 0.3 and tail[-1] >= tail[0]:
                best_i = min(range(len(vals)), key=lambda j: vals[j] if math.isfinite(vals[j]) else math.inf)
                out.append(self._fact("log.loss_divergence", s.steps[best_i], s.lines[best_i]))
        return out

    def _grad_facts(self, s: Series) -> list[Fact]:
        out: list[Fact] = []
        fin = [v for v in s.vals if math.isfinite(v)]
        if not fin:
            return out
        mx = max(fin)
        i_mx = list(s.vals).index(mx)
        out.append(self._fact("log.grad_norm_max", mx, s.lines[i_mx]))
        if all(math.isfinite(v) for v in s.vals) and len(fin) >= 2:
            # a finite grad norm all along rules out causes that need NaN weights (e.g. a NaN hidden by the loss filter)
            out.append(self._fact("log.grad_norm_finite", True, s.lines[i_mx]))
        med = median(fin)
        for i, v in enumerate(s.vals):
            if math.isfinite(v) and (v > 1e3 or (med > 0 and v > 100 * med and v > 10)):
                out.append(self._fact("log.grad_norm_explosion", s.steps[i], s.lines[i]))
                break
        for i, v in enumerate(s.vals):
            if i > 0 and v == 0.0 and all(x == 0.0 for x in s.vals[i:]) and max(s.vals[:i]) > 0:
                out.append(self._fact("log.grad_norm_zero", s.steps[i], s.lines[i]))
                break
        else:
            if len(fin) >= 2 and all(v == 0.0 for v in fin):
                out.append(self._fact("log.grad_norm_zero", s.steps[0], s.lines[0]))
        return out

    def _rl_facts(self) -> list[Fact]:
        out: list[Fact] = []
        kl = self.series.get("kl")
        if kl is not None and len(kl.vals) >= 4:
            fin = [abs(v) for v in kl.vals if math.isfinite(v)]
            base = median(fin[: max(2, len(fin) // 3)]) if fin else 0
            for i, v in enumerate(kl.vals):
                if not math.isfinite(v) or (abs(v) > 1.0 and abs(v) > 10 * max(base, 0.01)):
                    out.append(self._fact("log.kl_explosion", kl.steps[i], kl.lines[i]))
                    break
        ent = self.series.get("entropy")
        if ent is not None and len(ent.vals) >= 4:
            first = next((abs(v) for v in ent.vals if math.isfinite(v) and v != 0), 0)
            for i, v in enumerate(ent.vals):
                if first and math.isfinite(v) and abs(v) < 0.1 * first:
                    out.append(self._fact("log.entropy_collapse", ent.steps[i], ent.lines[i]))
                    break
        acc = self.series.get("reward_acc")
        if acc is not None and len(acc.vals) >= 3 and all(v == 0.0 for v in acc.vals if math.isfinite(v)):
            out.append(self._fact("log.rewards_accuracy_zero", True, acc.lines[0]))
        rew, rl = self.series.get("reward"), self.series.get("resp_len")
        if rew is not None and rl is not None and len(rew.vals) >= 6 and len(rl.vals) >= 6:
            k = len(rew.vals) // 3
            rlv = [v for v in rl.vals if math.isfinite(v)]
            if median(rew.vals[-k:]) > median(rew.vals[:k]) and rlv and (median(rlv[-k:]) < 0.5 * median(rlv[:k]) or median(rlv[-k:]) > 2 * median(rlv[:k])):
                out.append(self._fact("log.reward_hacking", rew.steps[-k], rew.lines[-k]))
        return out


def read_log(lines: Iterable[str], file: str) -> list[Fact]:
    r = LogReader(file)
    for n, line in enumerate(lines, 1):
        r.feed(line, n)
    return r.facts()


def read_trainer_state(text: str, data: object, file: str) -> list[Fact]:
    """trainer_state.json: the `log_history` list, with the line of each entry."""
    return trainer_state_reader(text, data, file).facts()


def trainer_state_reader(text: str, data: object, file: str) -> LogReader:
    """The reader fed with a trainer_state.json's `log_history` (anything else in that place is read as empty)."""
    r = LogReader(file)
    hist = data.get("log_history") if isinstance(data, dict) else None
    if not isinstance(hist, list):
        hist = []
    line_of: dict[int, int] = {}
    idx = -1
    depth_hist = False
    for n, ln in enumerate(text.splitlines(), 1):
        if '"log_history"' in ln:
            depth_hist = True
            continue
        if depth_hist and ln.strip().startswith("{"):
            idx += 1
            line_of[idx] = n
    r.feed_records(hist, line_of)
    return r


# A tool's own error line (`sbatch: error: ...`, `ld: fatal: ...`): a log, though it reads like `key: value`.
TOOL_ERROR = re.compile(r"^[\w.\-]+: (?:error|fatal): \S", re.M)


def looks_like_log(text: str) -> bool:
    head = text[:20000]
    return bool(
        re.search(
            r"\{'loss':|\"loss\":\s*[\d.]|\bstep\s*[:=]?\s*\d+.*(loss|kl|reward|entropy)|OVERFLOW|Traceback|"
            r"(loss|grad_norm|kl|reward|entropy)[\w/]*\s*[:=]\s*[-\d.]|\[rank\d+\]|INFO|WARNING|Error:",
            head,
        )
        or TOOL_ERROR.search(head)
    )
