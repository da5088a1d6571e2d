"""Rich renderings of the judge's answers: a verdict line, batch progress, the metrics table, leaderboards.

Every function returns a renderable (or a string) and prints nothing, so commands choose the console.
"""

import re
import time
from collections.abc import Callable

from rich import box
from rich.console import Console, Group
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from service.client import models
from service.client.models import JOB_STAGES, VERDICT_STATUSES

STATUS_STYLE = {"correct": "green", "incorrect": "red", "compile_error": "yellow", "runtime_error": "magenta",
                "timeout": "magenta", "policy_violation": "bold red", "tamper_detected": "bold red",
                "system_error": "dim"}

P_THRESHOLDS = ("0", "1", "1.5", "2")
PASS_AT_SHOWN = ("1", "5", "10")
"""pass@k rows of the table (and the largest k); `--json` and GET .../metrics have every k."""


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _num(value: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if value is None else fmt.format(value)


def status_text(status: str | None) -> Text:
    return Text(status or "-", style=STATUS_STYLE.get(status or "", ""))


class WaitProgress:
    """What `submit --wait` shows while it waits: the stage and the seconds since the wait began, redrawn by a rich
    status spinner (which renders this object on every refresh, so the seconds tick between polls), and one line
    per change of stage, so a long wait says where the time went (a first build on a host builds the shared
    headers too: minutes in "compiling")."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.stage = "submitted"
        self.since = self.started
        self.headers = ""

    def update(self, view: models.Submission) -> str:
        """The line for a change of stage: elapsed seconds, the stage, its queue position where there is one, and
        the shared headers' build while a worker is still at it."""
        now = time.monotonic()
        where = f" (position {view.position})" if view.position is not None else ""
        self.headers = f"; {view.shared_headers.line()}" if view.shared_headers else ""
        if f"{view.stage}{where}" != self.stage:
            self.stage, self.since = f"{view.stage}{where}", now
        return f"{now - self.started:6.1f} s  {self.stage}{self.headers}"

    def __rich__(self) -> str:
        now = time.monotonic()
        return f"{self.stage} for {now - self.since:.0f} s ({now - self.started:.0f} s since submitting){self.headers}"


def verdict_line(verdict: models.Verdict | None) -> str:
    """`status: diagnosis`, the line scripts parse after `submit --wait`."""
    if verdict is None:
        return "none: no verdict"
    first = (verdict.diagnosis or "").strip().splitlines()
    return f"{verdict.status}: {first[0] if first else ''}"


WIDE = 120
"""Console width from which `batch --watch` draws its full 40-cell bar; narrower, a 20-cell one."""


class BatchProgress(Progress):
    """`batch --watch`: the bar (samples done, elapsed, eta) on one line, then the counts (`counts_text`) packed
    into lines of the console's width, so at 80 columns nothing is cut and no `status n` is split across lines."""

    def get_renderables(self):  # noqa: ANN201 (rich's signature)
        yield self.make_tasks_table(self.tasks)
        for task in self.tasks:
            if task.fields.get("counts"):
                yield packed(task.fields["counts"], self.console.width)


def packed(counts: str, width: int) -> Text:
    """`counts_text` in lines of at most `width` cells, broken only between fields (at ` · ` or ` | `); a new line
    starts with `| ` where the verdicts begin."""
    parts = re.split(r"( · | \| )", counts)
    lines, line = [], Text.from_markup(parts[0])
    for sep, field in zip(parts[1::2], parts[2::2], strict=True):
        piece = Text.from_markup(field)
        if line.cell_len + len(sep) + piece.cell_len <= width:
            line.append(sep).append_text(piece)
        else:
            lines.append(line)
            line = (Text("| ") if "|" in sep else Text()).append_text(piece)
    lines.append(line)
    for text in lines:
        text.truncate(width, overflow="ellipsis")  # only a single field wider than the console
    return Text("\n").join(lines)


def batch_progress(console: Console) -> Progress:
    bar = 40 if console.width >= WIDE else 20
    return BatchProgress(TextColumn("[bold]{task.description}"), BarColumn(bar_width=bar), MofNCompleteColumn(),
                         TimeElapsedColumn(), TextColumn("{task.fields[eta]}"), console=console)


def counts_text(batch: models.Batch) -> str:
    """`queued 3 · compiling 1 · done 40 | correct 12 · compile_error 20`: stages, then verdicts."""
    stages = " · ".join(f"{s} {batch.counts[s]}" for s in JOB_STAGES if batch.counts.get(s))
    order = [s for s in VERDICT_STATUSES if batch.verdicts.get(s)] + \
        [s for s in batch.verdicts if s not in VERDICT_STATUSES and batch.verdicts[s]]
    verdicts = " · ".join(f"[{STATUS_STYLE.get(s, '')}]{s} {batch.verdicts[s]}[/]" for s in order)
    dup = f" · duplicates {batch.duplicates}" if batch.duplicates else ""
    return f"{stages} | {verdicts}{dup}" if verdicts else stages + dup


def eta_text(batch: models.Batch) -> str:
    if batch.finished or batch.eta_s is None:
        return ""
    return f"eta {batch.eta_s:.0f}s"


def batch_table(batch: models.Batch) -> Table:
    """The batch's state and its verdict counts."""
    table = Table(title=f"batch {batch.id}" + (f" ({batch.name})" if batch.name else ""), show_header=True)
    table.add_column("verdict")
    table.add_column("samples", justify="right")
    table.add_column("share", justify="right")
    done = sum(batch.verdicts.values()) or 1
    for status in [s for s in VERDICT_STATUSES if s in batch.verdicts] + \
            [s for s in batch.verdicts if s not in VERDICT_STATUSES]:
        table.add_row(status_text(status), str(batch.verdicts[status]), _pct(batch.verdicts[status] / done))
    table.caption = (f"{batch.state} · {batch.total} samples · {batch.duplicates} duplicates shared a verdict"
                     f" · {batch.progress:.0%} done")
    return table


def metrics_table(metrics: models.BatchMetrics) -> Table:
    """The numbers KernelBench papers report: one column for the whole batch and one per (task, model),
    one row per metric, so the table stays narrow however many thresholds and k there are."""
    groups: list[tuple[str, models.Metrics]] = [("all", metrics.overall)]
    groups += [(f"{m.task} / {m.model or '-'}", m) for m in metrics.by_task_model]
    table = Table(title="metrics", box=box.SIMPLE_HEAVY)
    table.add_column("metric", style="bold")
    for name, _ in groups:
        table.add_column(name, justify="right")

    def row(label: str, value: Callable[[models.Metrics], str]) -> None:
        table.add_row(label, *[value(m) for _, m in groups])

    row("samples", lambda m: str(m.samples))
    row("compiled", lambda m: _pct(m.compile_rate))
    row("correct", lambda m: _pct(m.correct_rate))
    for baseline, label in (("eager", "eager"), ("compile", "torch.compile")):
        for p in P_THRESHOLDS:
            row(f"fast_{p} vs {label}", lambda m, b=baseline, p=p: _pct(m.fast_p.get(b, {}).get(p)))
    for baseline, label in (("eager", "eager"), ("compile", "torch.compile")):
        row(f"geomean speedup vs {label}", lambda m, b=baseline: _num(m.geomean_speedup.get(b), "{:.2f}x"))
    ks = sorted({k for _, m in groups for k in m.pass_at_k if k.isdigit()}, key=int)
    for k in [k for k in ks if k in PASS_AT_SHOWN or k == ks[-1]]:
        row(f"pass@{k}", lambda m, k=k: _pct(m.pass_at_k.get(k)))
    best = sorted({k for _, m in groups for k in m.best_of_k_speedup.get("eager", {}) if k.isdigit()}, key=int)
    for k in best[-1:]:
        row(f"best-of-{k} speedup vs eager", lambda m, k=k: _num(m.best_of_k_speedup.get("eager", {}).get(k),
                                                                 "{:.2f}x"))
    table.caption = "fast_p: share of judged samples that are correct and more than p times faster than the baseline"
    return table


def summary(batch: models.Batch, metrics: models.BatchMetrics | None) -> Group:
    parts = [batch_table(batch)]
    if metrics is not None:
        parts.append(metrics_table(metrics))
    return Group(*parts)


def leaderboard_table(board: models.Leaderboard) -> Group:
    tables = []
    for device in board.devices:
        table = Table(title=f"{board.task} · {device.device_name} · by {board.by}, sorted by {board.sort}")
        # By model, the entry's name is the model: a second model column would repeat it.
        model_column = board.by != "model"
        for name in ("#", board.by, *(("model",) if model_column else ()), "median ms", "x eager", "x compile",
                     "speed of light", "submission"):
            table.add_column(name, justify="right" if name not in (board.by, "model", "submission") else "left")
        for e in device.entries:
            table.add_row(str(e.rank), e.name, *((e.model or "-",) if model_column else ()),
                          _num(e.median_ms, "{:.3f}"), _num(e.speedup_eager), _num(e.speedup_compile),
                          _pct(e.speed_of_light), e.submission_id)
        tables.append(table)
    if not tables:
        tables.append(Text(f"no ranked submissions for {board.task} yet"))
    return Group(*tables)


def tasks_table(tasks: list[models.TaskSummary]) -> Table:
    table = Table(title="tasks")
    for name in ("id", "KernelBench", "title", "official shape", "judged here"):
        table.add_column(name)
    for t in tasks:
        judged = "-" if t.judged_shape is None else f"{' x '.join(map(str, t.judged_shape))} ({t.judged_device})"
        table.add_row(t.id, t.kernelbench_id, t.title, " x ".join(map(str, t.official_shape)), judged)
    if tasks and tasks[0].judged_device == "cpu":
        table.caption = ("judged on this host's CPU at the tasks' CPU size; `prompt TASK --language cpp` asks for "
                         "C++ the CPU runs")
    return table


def submission_table(sub: models.Submission) -> Table:
    table = Table(show_header=False, title=f"submission {sub.id}")
    table.add_column("field", style="bold")
    table.add_column("value")
    v = sub.verdict
    rows = [("task", sub.task), ("submitter", sub.submitter or "-"), ("model", sub.model or "-"),
            ("stage", sub.stage + (f" (position {sub.position})" if sub.position is not None else ""))]
    if v is not None:
        rows += [("verdict", status_text(v.status)), ("diagnosis", v.diagnosis or "-")]
        if v.performance:
            cand = v.performance.get("candidate", {})
            rows += [("median ms", _num(cand.get("median_ms"), "{:.4f}")),
                     ("x eager", _num(v.speedup("eager"))), ("x compile", _num(v.speedup("compile"))),
                     ("speed of light", _pct(v.performance.get("speed_of_light_fraction")))]
    for name, value in rows:
        table.add_row(name, value)
    return table


def _na(value: float | None, fmt: str = "{:.2f}") -> str:
    """A profile's figure: "n/a" where ncu gave none (never "-" or 0: the reader must see it was not measured)."""
    return "n/a" if value is None else fmt.format(value)


def _dims(value: list[int] | None) -> str:
    return "n/a" if not value else "x".join(str(v) for v in value)


def profile_table(found: models.SubmissionProfile) -> Group | Text:
    """A profile's kernels, one row each (n/a where ncu gave no value), under its status line."""
    head = Text.assemble(("profile ", "bold"), (found.status, "green" if found.status == "ok" else "yellow"),
                         f": {found.reason}" if found.reason and found.status != "ok" else "",
                         f"  ({found.gpu_seconds:.1f} s of device time)" if found.gpu_seconds else "")
    kernels = found.kernels
    if not kernels:
        return head
    table = Table(box=box.SIMPLE_HEAD)
    for column in ("kernel", "launches", "time (us)", "DRAM TB/s", "DRAM % peak", "SM %", "occupancy %",
                   "regs", "smem/block", "grid", "block", "top stalls"):
        table.add_column(column, overflow="fold")
    for k in sorted(kernels, key=lambda k: -(k.duration_ns or 0.0)):
        stalls = ", ".join(f"{s['reason']} {s['share_pct']:.0f}%" for s in k.stalls) or "n/a"
        table.add_row(k.name.split("(")[0][:60], str(k.launches), _na(None if k.duration_ns is None
                                                                      else k.duration_ns / 1e3, "{:.1f}"),
                      _na(None if k.dram_bytes_per_s is None else k.dram_bytes_per_s / 1e12),
                      _na(k.dram_pct_of_peak, "{:.1f}"), _na(k.sm_pct_of_peak, "{:.1f}"),
                      _na(k.achieved_occupancy_pct, "{:.1f}"), _na(k.registers_per_thread, "{:d}"),
                      _na(k.shared_bytes_per_block, "{:d}"), _dims(k.grid), _dims(k.block), stalls)
    return Group(head, table)
