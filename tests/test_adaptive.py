"""repeats: auto and --budget (issue 21): processes go only to cells in undecided comparisons, up to
the maximum, within the budget; what is left undecided says so; a rerun goes on process by process."""
import dataclasses
import math
import os
import random
from dataclasses import dataclass

import pytest

from host_helpers import (
    RecordingBackend,
    answer_check,
    local_run_options,
    make_record,
    small_matrix_data,
    use_backend,
    write_matrix,
)
from matrixbench.executors import adaptive
from matrixbench.executors.scheduler import RUNNER_START_S
from matrixbench.matrix import Overrides, load_matrix
from matrixbench.matrix.comparisons import Comparison
from matrixbench.run.at_once import AtOnce
from matrixbench.run.command import run_matrix
from matrixbench.run.dry_run import describe_plan
from matrixbench.run.manifest import read_manifest
from matrixbench.run.pending import pending_work
from runner.core import Cell
from runner.schema import record_path, write_record


@dataclass(frozen=True)
class Verdict:
    """What the waves read of stats.judge's Judgement (no interval: always worth more processes)."""

    verdict: str
    low: None = None

    @property
    def decided(self):
        return self.verdict != "undecided"


def _matrix(tmp_path, **overrides):
    return load_matrix(write_matrix(tmp_path), Overrides(**{"repeats": "auto", "repeats_max": 6,
                                                            "batch_sizes": [1], **overrides}))


def _processes(run_path):
    """(image, model, mode) -> the repeat indices recorded."""
    found = {}
    for path in sorted(run_path.glob("*/*.json")):
        if path.name in ("cells.json", "run.json"):
            continue
        stem = path.name[:-len(".json")]
        cell_id, _, repeat = stem.partition(".r")
        model = "vit" if cell_id.startswith("vit") else "detr-resnet-101"
        mode = "default" if "_default_" in cell_id else "eager"
        found.setdefault((path.parent.name, model, mode), set()).add(int(repeat or 0))
    return found


class Judge:
    """A judge double by model: decided once both sides have ``needs[model]`` processes."""

    def __init__(self, needs):
        self.needs, self.calls = needs, []

    def __call__(self, baseline, candidate, *, margin_pct, rounds=None):
        self.calls.append((len(baseline), len(candidate), margin_pct))
        # the means carry no model; the double decides by count, the run tells models apart by mean
        model = "vit" if baseline[0] == 2.5 else "detr-resnet-101"
        return Verdict("faster" if min(len(baseline), len(candidate)) >= self.needs[model] else "undecided")


class MeanBackend(RecordingBackend):
    """Records that took ``duration_s``, vit's with mean 2.5 ms, detr's 7.5 ms (the judge double
    tells them apart by it); ``statuses`` as RecordingBackend's."""

    def __init__(self, duration_s=10.0, clock=None, start_s=0.0, **kwargs):
        super().__init__(**kwargs)
        self.duration_s, self.clock, self.start_s = duration_s, clock, start_s

    def run(self, request):
        if request.work.check:   # the run's model check (every model builds)
            return answer_check(request)
        self.requests.append(request)
        if self.clock is not None:   # the runner's start, before its first process
            self.clock[0] += self.start_s
        for repeat in request.repeats():
            if self.stop_after is not None and self.ran >= self.stop_after:
                raise KeyboardInterrupt
            self.ran += 1
            cell = repeat.cell
            record = make_record(cell, self.statuses.get(cell.model, "ok"), mean_ms=2.5 if cell.model == "vit" else 7.5)
            record.repeat, record.duration_s = repeat.index, self.duration_s
            write_record(request.paths.out_dir, record)
            if self.clock is not None:
                self.clock[0] += self.duration_s
        return 0


def _use_judge(monkeypatch, judge):
    monkeypatch.setattr(adaptive, "default_judge", lambda: judge)
    return judge


def test_auto_adds_processes_only_where_comparisons_are_undecided(tmp_path, monkeypatch):
    use_backend(monkeypatch, MeanBackend())
    judge = _use_judge(monkeypatch, Judge({"vit": 5, "detr-resnet-101": 2}))
    summary = run_matrix(_matrix(tmp_path), local_run_options(tmp_path, order_seed=1))
    run_path = tmp_path / "results" / "r1"
    processes = _processes(run_path)
    assert {key: len(indices) for key, indices in processes.items() if key[1] == "vit"} == {
        (image, "vit", mode): 5 for image in ("stable", "latest") for mode in ("eager", "default")}
    assert {key: len(indices) for key, indices in processes.items() if key[1] != "vit"} == {
        (image, "detr-resnet-101", mode): 3 for image in ("stable", "latest") for mode in ("eager", "default")}
    assert all(margin == 3.0 for _, _, margin in judge.calls)
    repeats = read_manifest(run_path)["repeats"]
    assert repeats["policy"] == "auto" and repeats["minimum"] == 3 and repeats["maximum"] == 6
    assert repeats["added_processes"] == 8 and repeats["undecided"] == [] and repeats["waves"] == 3
    assert "repeats auto" in summary.describe() and "8 process(es) added" in summary.describe()


def test_what_stays_undecided_at_the_maximum_says_so(tmp_path, monkeypatch):
    use_backend(monkeypatch, MeanBackend())
    _use_judge(monkeypatch, Judge({"vit": 99, "detr-resnet-101": 2}))
    summary = run_matrix(_matrix(tmp_path, repeats_max=4), local_run_options(tmp_path, order_seed=1))
    run_path = tmp_path / "results" / "r1"
    assert {len(indices) for key, indices in _processes(run_path).items() if key[1] == "vit"} == {4}
    undecided = read_manifest(run_path)["repeats"]["undecided"]
    # vit: stable->latest for both modes, default vs eager in both images
    assert len(undecided) == 4 and {doubt["why"] for doubt in undecided} == {"maximum"}
    assert {doubt["kind"] for doubt in undecided} == {"image_change", "speedup"}
    assert all(doubt["processes"] == [4, 4] for doubt in undecided)
    assert "4 left UNDECIDED (4 at maximum)" in summary.describe()


def test_the_budget_admits_no_process_that_would_end_past_it(tmp_path, monkeypatch):
    """Each process takes 60 s and each runner's start the typical start the estimate takes where no record
    shows one (the backend moves the clock; the records say the processes' durations); the first wave's 24
    processes in 6 runners fit 30 minutes by the scheduler's model; of the 8 more vit wants, those that fit with
    their runners' starts. The budget held before runner starts were counted only where starts cost nothing
    (the audit: a 30 s budget let a 1 min 45 s run through)."""
    clock = [0.0]
    use_backend(monkeypatch, MeanBackend(duration_s=60.0, clock=clock, start_s=RUNNER_START_S["full"]))
    _use_judge(monkeypatch, Judge({"vit": 5, "detr-resnet-101": 2}))
    monkeypatch.setattr(adaptive.time, "monotonic", lambda: clock[0])
    summary = run_matrix(_matrix(tmp_path), local_run_options(tmp_path, order_seed=1, budget_min=30))
    run_path = tmp_path / "results" / "r1"
    repeats = read_manifest(run_path)["repeats"]
    added, held = repeats["added_processes"], repeats["held_back_processes"]
    assert clock[0] <= 30 * 60.0                                   # the run ended within its budget
    assert clock[0] + 60.0 + RUNNER_START_S["full"] > 30 * 60.0    # and one more runner would not have fitted
    assert repeats["budget_min"] == 30 and added + held == 8 and 0 < held
    assert {doubt["why"] for doubt in repeats["undecided"]} == {"budget"}
    assert sum(len(indices) for indices in _processes(run_path).values()) == 8 * 3 + added
    assert f"the budget held back {held} process(es)" in summary.describe()


def test_a_budget_too_small_for_any_process_says_it_held_back_the_whole_first_wave(tmp_path, monkeypatch):
    """issue 33: a budget under one process's estimate runs nothing; run.json and the summary say the
    budget held back every process of the first wave (a later, empty wave used to reset the count to 0)."""
    clock = [0.0]
    use_backend(monkeypatch, MeanBackend(duration_s=60.0, clock=clock))
    _use_judge(monkeypatch, Judge({}))
    monkeypatch.setattr(adaptive.time, "monotonic", lambda: clock[0])
    summary = run_matrix(_matrix(tmp_path), local_run_options(tmp_path, order_seed=1, budget_min=0.01))
    run_path = tmp_path / "results" / "r1"
    repeats = read_manifest(run_path)["repeats"]
    assert clock[0] == 0.0 and not _processes(run_path)                       # nothing ran
    assert repeats["held_back_processes"] == 8 * 3                           # the first wave: 8 cells x 3
    assert "the budget held back 24 process(es)" in summary.describe()


def test_budget_admits_a_prefix_of_the_run_order_over_its_parallel_runners():
    times = iter([0.0, 30.0])
    budget = adaptive.Budget(100.0, parallel=2, clock=lambda: next(times))
    assert budget.admit([40.0, 40.0, 40.0, 40.0, 40.0]) == 3         # 30 + 120 / 2 = 90 <= 100; +40/2 > 100
    assert adaptive.Budget(None).admit([1e9] * 3) == 3


def test_budget_counts_each_gpu_types_processes_over_its_own_runners():
    """A Ray cluster's budget (it counted one runner at a time): A100's processes over its 2 runners, T4's over its
    one; the longest type's span decides, as the bill's bill_span does."""
    budget = adaptive.Budget(100.0, clock=lambda: 0.0)
    budget.at_once = AtOnce({"A100": 2, "T4": 1}, "asked")
    groups = ["A100", "T4", "A100", "T4", "A100", "A100", "T4"]
    assert budget.admit([40.0] * 7, groups) == 6   # A100 160 / 2 = 80, T4 80 fit; T4's third, 120 / 1, does not
    assert adaptive.Budget(100.0, clock=lambda: 0.0).admit([40.0] * 7, groups) == 2   # one at a time: 3 x 40 > 100
    budget.at_once = AtOnce({"A100": 2, "T4": 0}, "asked")   # a type whose nodes hold no task: one runner, not none
    assert budget.admit([40.0] * 7, groups) == 6


def test_a_rerun_of_an_interrupted_auto_run_goes_on_process_by_process(tmp_path, monkeypatch):
    _use_judge(monkeypatch, Judge({"vit": 5, "detr-resnet-101": 2}))
    use_backend(monkeypatch, MeanBackend(stop_after=8 * 3 + 3))     # stopped within the second wave
    with pytest.raises(KeyboardInterrupt):
        run_matrix(_matrix(tmp_path), local_run_options(tmp_path, order_seed=1))
    run_path = tmp_path / "results" / "r1"
    assert sum(len(indices) for indices in _processes(run_path).values()) == 8 * 3 + 3
    backend = use_backend(monkeypatch, MeanBackend())
    run_matrix(_matrix(tmp_path), local_run_options(tmp_path, order_seed=1))
    processes = _processes(run_path)
    assert {len(indices) for key, indices in processes.items() if key[1] == "vit"} == {5}
    assert {len(indices) for key, indices in processes.items() if key[1] != "vit"} == {3}
    assert sum(len(request.repeats()) for request in backend.requests) == 8 - 3   # only what was missing
    assert read_manifest(run_path)["repeats"]["undecided"] == []


def test_a_failed_side_gets_no_more_processes(tmp_path, monkeypatch):
    use_backend(monkeypatch, MeanBackend(statuses={"vit": "error"}))
    _use_judge(monkeypatch, Judge({"vit": 5, "detr-resnet-101": 99}))
    run_matrix(_matrix(tmp_path, models=["vit", "detr-resnet-101"]), local_run_options(tmp_path, order_seed=1))
    processes = _processes(tmp_path / "results" / "r1")
    assert {len(indices) for key, indices in processes.items() if key[1] == "vit"} == {3}
    assert {len(indices) for key, indices in processes.items() if key[1] != "vit"} == {6}


def test_fixed_repeats_run_one_wave_and_judge_nothing(tmp_path, monkeypatch):
    use_backend(monkeypatch, MeanBackend())
    _use_judge(monkeypatch, None)       # calling it would fail
    summary = run_matrix(_matrix(tmp_path, repeats=2), local_run_options(tmp_path, order_seed=1))
    assert {len(indices) for indices in _processes(tmp_path / "results" / "r1").values()} == {2}
    assert read_manifest(tmp_path / "results" / "r1")["repeats"]["policy"] == "fixed"
    assert "repeats auto" not in summary.describe()


def test_comparisons_are_the_reports_image_changes_speedups_and_mode_changes(tmp_path):
    matrix = load_matrix(write_matrix(tmp_path), Overrides(models=["vit"], batch_sizes=[1],
                                                           modes=["eager", "default", "max-autotune"]))
    kinds = sorted((c.kind, c.baseline[0], c.baseline[1].mode, c.candidate[0], c.candidate[1].mode)
                   for c in adaptive.comparisons(pending_work(matrix, tmp_path / "r")))
    assert kinds == [("image_change", "stable", mode, "latest", mode) for mode in ("default", "eager", "max-autotune")
                     ] + [("mode_change", image, "default", image, "max-autotune") for image in ("latest", "stable")
                          ] + [("speedup", image, "eager", image, mode) for image in ("latest", "stable")
                               for mode in ("default", "max-autotune")]


def test_the_bill_gives_the_minimum_and_maximum_from_earlier_records(tmp_path):
    matrix = _matrix(tmp_path, models=["vit"])
    run_path = tmp_path / "results" / "r1"
    text = describe_plan(matrix, run_path, False, False, budget_min=30)
    # 4 cells x 3 processes: 2 eager at 10 s, 2 default at 60 s by the scheduler's model, each default
    # process with its paired eager blocks (issue 32: one more eager loop, 10 s); and 6 runner starts at the
    # typical 8.8 s (scheduler.RUNNER_START_S: no record here or beside shows a start); at the maximum twice both,
    # as a fixed 6 a cell would bill (the later waves' runners too)
    assert "estimated duration: 8m53s at the minimum (3 processes a cell)" in text
    assert "up to 17m46s if every comparison stays undecided (6 a cell)" in text and "--budget 30 min" in text
    assert "6 runner start(s) at 9 s each, a typical start" in text
    earlier = tmp_path / "results" / "r0" / "stable"
    for plan in pending_work(matrix, run_path)[:1]:
        for cell in plan.cells:
            record = make_record(cell)
            record.duration_s = 1.0
            earlier.mkdir(parents=True, exist_ok=True)
            write_record(earlier, record)
    assert record_path(earlier, plan.cells[0]).exists()
    text = describe_plan(matrix, run_path, False, False)
    # stable's 6 processes now take 1 s each (latest's 4 default processes keep their paired eager blocks); the
    # earlier records show no gap between runners, so the 6 starts stay typical
    assert "estimated duration: 4m59s at the minimum" in text and "up to 9m58s" in text


class NoisyBackend(RecordingBackend):
    """Process means with planted truth: latest runs vit 20% faster than stable, detr alike in both;
    compiled (default) takes half of eager; each process off by a seeded normal draw of ``cv``."""

    def __init__(self, cv):
        super().__init__()
        self.cv, self.rng = cv, random.Random(7)

    def run(self, request):
        if request.work.check:   # the run's model check (every model builds)
            return answer_check(request)
        for repeat in request.repeats():
            cell = repeat.cell
            truth = (0.8 if cell.model == "vit" and request.image.name == "latest" else 1.0) * (
                5.0 if cell.mode == "default" else 10.0)
            record = make_record(cell, mean_ms=truth * (1 + self.rng.gauss(0, self.cv)))
            record.repeat = repeat.index
            write_record(request.paths.out_dir, record)
        return 0


def test_with_the_real_judge_a_clear_change_stops_at_the_minimum_and_a_close_call_gets_more(tmp_path, monkeypatch):
    """The spending rule: a 20% change at 1.5% noise is starred at the strict interim level (0.1%) at
    the minimum; the no-change cells (detr) get more where their interval is too wide."""
    use_backend(monkeypatch, NoisyBackend(cv=0.015))
    run_matrix(_matrix(tmp_path, margin_pct=3.0, repeats_max=10), local_run_options(tmp_path, order_seed=1))
    processes = _processes(tmp_path / "results" / "r1")
    assert {len(indices) for key, indices in processes.items() if key[1] == "vit"} == {3}
    assert sum(len(indices) for key, indices in processes.items() if key[1] != "vit") > 4 * 3


@dataclass(frozen=True)
class Interval:
    ratio: float
    low: float
    high: float
    verdict: str = "undecided"


def _around(ratio, half):
    return Interval(ratio, ratio * math.exp(-half), ratio * math.exp(half))


def test_the_final_stopping_rule_looks_at_the_width_alone():
    policy = adaptive.Policy(3, 10, 3.0)
    for half in (0.02, 0.04, 0.5):
        answers = {adaptive.goes_on(_around(ratio, half), policy, 3, adaptive.FINAL)
                   for ratio in (0.5, 0.97, 1.0, 1.03, 2.0)}
        assert len(answers) == 1, half                      # the same answer whatever the estimate
    assert not adaptive.goes_on(_around(1.0, 0.02), policy, 3, adaptive.FINAL)      # narrow enough to say "no change"
    assert adaptive.goes_on(_around(1.0, 0.04), policy, 3, adaptive.FINAL)          # 10 a side would get it under 3%
    assert not adaptive.goes_on(_around(1.0, 0.5), policy, 3, adaptive.FINAL)       # 10 a side could not: futile
    # spending: a star stops only at the strict interim level
    assert adaptive.goes_on(_around(1.06, 0.05), policy, 3, adaptive.SPENDING)
    assert not adaptive.goes_on(_around(1.5, 0.05), policy, 3, adaptive.SPENDING)


def test_a_comparison_that_the_maximum_could_not_decide_gets_no_more_processes(tmp_path, monkeypatch):
    """No change with 8% noise between processes: at 10 processes a side the interval would still
    be about +-7.5%, wider than the 3% margin and than the change: futile, it stays near the
    minimum (a noisy estimate may look like a change for a few waves) instead of going to 10."""
    use_backend(monkeypatch, NoisyBackend(cv=0.08))
    run_matrix(_matrix(tmp_path, margin_pct=3.0, repeats_max=10, models=["detr-resnet-101"]),
               local_run_options(tmp_path, order_seed=1))
    # (under the spending rule a noisy estimate that looks like a change keeps its processes coming
    # until the strict interim level or futility says otherwise: a 95% star no longer stops it)
    assert max(len(indices) for indices in _processes(tmp_path / "results" / "r1").values()) < 10
    undecided = read_manifest(tmp_path / "results" / "r1")["repeats"]["undecided"]
    assert {doubt["kind"] for doubt in undecided} == {"image_change"}
    assert {doubt["why"] for doubt in undecided} == {"futile"}


def test_promising_projects_the_pooled_spread_to_the_maximum():
    policy = adaptive.Policy(3, 10, 3.0)

    @dataclass
    class Interval:
        ratio: float
        low: float = 0.5

    spread = adaptive.Spread(0.02)   # at 10 a side: t(18) x 0.02 x sqrt(0.2) = 1.9% half-width
    assert adaptive.promising(Interval(1.05), policy, spread)        # a 5% change would be starred
    assert adaptive.promising(Interval(1.005), policy, spread)       # 0.5% + 1.9% fits the 3% margin
    assert not adaptive.promising(Interval(1.015), policy, spread)   # neither
    assert adaptive.promising(Interval(1.015), policy, None)         # nothing to judge the spread by yet
    assert adaptive.pooled_spread([adaptive.Processes([1.0, math.e ** 0.1]), adaptive.Processes([5.0])]) == \
        pytest.approx(math.sqrt(0.1 ** 2 / 2))


def test_promising_projects_a_paired_comparison_with_its_round_spread():
    """Issue 34: a comparison judged paired by round is projected at ``maximum`` rounds, t(m - 1) x sd / sqrt(m) of
    its round log-ratios; a Welch one (Spread(paired=False)) at the report's df for equal sides (2m - 2 less one:
    t(17) at m = 10) x sd x sqrt(2 / m) of process means. At sd 2%, m = 10: paired +-1.43%, Welch +-1.89%."""
    policy = adaptive.Policy(3, 10, 3.0)
    welch, paired = adaptive.Spread(0.02), adaptive.Spread(0.02, paired=True)
    assert welch.half_width(10) == pytest.approx(2.1098 * 0.02 * math.sqrt(0.2), rel=1e-3)   # t_0.975(17)
    assert paired.half_width(10) == pytest.approx(2.2622 * 0.02 / math.sqrt(10), rel=1e-3)
    # a 1.5% change: the paired interval would star it, Welch's would neither star it nor fit the margin
    assert adaptive.promising(_around(1.015, 0.05), policy, paired)
    assert not adaptive.promising(_around(1.015, 0.05), policy, welch)
    # 1.2% + 1.43% fits the 3% margin paired; 1.2% + 1.89% does not
    assert adaptive.promising(_around(1.012, 0.05), policy, paired)
    assert not adaptive.promising(_around(1.012, 0.05), policy, welch)
    # paired but round ratios spread by 4% (+-2.86% at 10 rounds): neither, futile
    assert not adaptive.promising(_around(1.015, 0.05), policy, adaptive.Spread(0.04, paired=True))
    # not tested yet, or no spread yet: promising
    assert adaptive.promising(Interval(1.015, None, None), policy, paired)
    assert adaptive.promising(_around(1.015, 0.05), policy, None)


def test_a_look_projects_paired_comparisons_with_their_kinds_pooled_round_spread():
    """Spreads.of: a judgement paired by round gets the round spread of its kind (pooled over the kind's paired
    comparisons: round_spread), a Welch one, or a kind with no paired comparison, the process spread."""
    from matrixbench.report import stats

    spreads = adaptive.Spreads(0.05, {"image_change": 0.01})
    cell = Cell("m0", "image-classification", "random", "full", 1, "eager", False, "float32")
    image = Comparison("image_change", ("A", cell), ("B", cell))
    speedup = Comparison("speedup", ("A", cell), ("A", cell))
    paired = stats.judge_sides([4.0, 4.1, 4.2], [4.0, 4.1, 4.25], margin_pct=3.0,
                               rounds=([(None, 0), (None, 1), (None, 2)],) * 2)
    welch = stats.judge_sides([4.0, 4.1, 4.2], [4.0, 4.1, 4.25], margin_pct=3.0)
    assert paired.pairing == stats.PAIRED_BY_ROUND and welch.pairing == stats.UNPAIRED
    assert spreads.of(image, paired) == adaptive.Spread(0.01, paired=True)
    assert spreads.of(image, welch) == adaptive.Spread(0.05)
    assert spreads.of(speedup, paired) == adaptive.Spread(0.05)
    assert adaptive.Spreads(None).of(image, welch) is None
    # pooled: each comparison about its own mean, (0.01^2 x 2 + 0.02^2 x 1) / 3 df
    assert adaptive.round_spread([[0.0, 0.01, 0.02], [0.0, 0.02 * math.sqrt(2)], [0.5]]) == \
        pytest.approx(math.sqrt((0.01 ** 2 * 2 + 0.02 ** 2) / 3))
    assert adaptive.round_spread([[0.1]]) is None


def test_the_bill_counts_seconds_that_run_alone_before_the_processes(tmp_path):
    """Issue 32: a dry run's noise check (first_s) is added once to both ends of the bill, not spread over runners."""
    matrix = load_matrix(write_matrix(tmp_path), Overrides(repeats="auto", repeats_min=2, repeats_max=4))
    works = pending_work(matrix, tmp_path / "results" / "r1")
    policy = adaptive.policy_of(matrix)
    low, high = adaptive.bill_seconds(policy, works, parallel=2)
    assert adaptive.bill_seconds(policy, works, parallel=2, first_s=10.0) == pytest.approx((low + 10.0, high + 10.0))
    assert "the noise check first, 10 s" in adaptive.bill(policy, works, AtOnce.here(2), noise_check_s=10.0)


def test_run_prints_the_bill_before_any_process_starts(tmp_path, monkeypatch):
    from host_helpers import Notes

    class Watching(MeanBackend):
        def run(self, request):
            self.notes_then = list(notes.notes)
            return super().run(request)

    backend = use_backend(monkeypatch, Watching())
    _use_judge(monkeypatch, Judge({"vit": 2, "detr-resnet-101": 2}))
    notes = Notes()
    run_matrix(_matrix(tmp_path, models=["vit"]), local_run_options(tmp_path, order_seed=1, budget_min=60), notes)
    bill = [note for note in backend.notes_then if note.startswith("estimated duration")]
    assert bill == ["estimated duration: 8m53s at the minimum (3 processes a cell), up to 17m46s if every comparison "
                    "stays undecided (6 a cell), one runner at a time (earlier records, else this machine's pace, "
                    "else the scheduler's model; 6 runner start(s) at 9 s each, a typical start: no record here "
                    "shows one yet); --budget 60 min stops admitting processes past it"]


def test_a_forced_auto_run_judges_only_what_it_measured_itself(tmp_path, monkeypatch):
    """A first run took vit to 5 processes a cell; --force reruns the minimum, and the extra
    processes are run again too instead of being judged from the older records."""
    _use_judge(monkeypatch, Judge({"vit": 5, "detr-resnet-101": 2}))
    use_backend(monkeypatch, MeanBackend())
    run_matrix(_matrix(tmp_path, models=["vit"]), local_run_options(tmp_path, order_seed=1))
    backend = use_backend(monkeypatch, MeanBackend())
    for path in (tmp_path / "results" / "r1").glob("*/*.json"):
        os.utime(path, (1.0, 1.0))            # written long before the forced run
    run_matrix(_matrix(tmp_path, models=["vit"]), local_run_options(tmp_path, order_seed=1, force=True))
    assert sum(len(request.repeats()) for request in backend.requests) == 4 * 5


@pytest.mark.parametrize("executor, slots, device, at_once", [
    ("sequential", 2, "cpu", "one runner at a time"),    # the audit: the bill said 2 while one ran at a time
    (None, 2, "cpu", "2 runner(s) at once"),
    ("slots", 2, "cpu", "2 runner(s) at once"),
    (None, "auto", "cpu", "one runner at a time"),
])
def test_the_bill_counts_the_runners_the_executor_runs_at_once(tmp_path, executor, slots, device, at_once):
    matrix = load_matrix(write_matrix(tmp_path), Overrides(models=["vit"], slots=slots))
    text = describe_plan(matrix, tmp_path / "results" / "r1", False, False, executor=executor, device=device)
    assert at_once in text.splitlines()[-1]


def test_a_ray_runs_bill_says_a_dry_run_did_not_ask_the_cluster(tmp_path):
    """--executor ray: a dry run that does not connect to the cluster (no --device cuda) counts one runner at a time
    and says that it did not ask."""
    matrix = load_matrix(write_matrix(tmp_path), Overrides(models=["vit"]))
    text = describe_plan(matrix, tmp_path / "results" / "r1", False, False, executor="ray", device="cpu")
    assert "one runner at a time (not asked: this dry run did not connect to the Ray cluster" in text.splitlines()[-1]


def test_a_clusters_bill_runs_each_gpu_types_processes_over_its_own_runners_and_ends_with_the_longest(tmp_path):
    """Two GPU types, the same cells on each: A100's units over its 2 runners, T4's over its 1; the run ends when
    T4's do, so the bill is T4's alone (its processes and its half of the runner starts, over one runner), not
    both types' over 3. One machine's (a group of every work) is bill_seconds' own."""
    data = dict(small_matrix_data(), gpu_types=["A100", "T4"])
    matrix = load_matrix(write_matrix(tmp_path, data), Overrides(models=["vit"]))
    works = pending_work(matrix, tmp_path / "results" / "r1")
    t4 = [work for work in works if work.gpu_type == "T4"]
    policy, estimates = adaptive.policy_of(matrix), adaptive.Estimates()
    at_once = AtOnce({"A100": 2, "T4": 1}, "asked the cluster")
    span = adaptive.bill_span(policy, works, at_once, estimates, runners=8)
    assert span == pytest.approx(adaptive.bill_seconds(policy, t4, 1, estimates, runners=4))
    assert span[0] > adaptive.bill_seconds(policy, works, 3, estimates, runners=8)[0]   # the old pooled figure
    assert adaptive.bill_span(policy, works, AtOnce.here(2), estimates, runners=8) == \
        pytest.approx(adaptive.bill_seconds(policy, works, 2, estimates, runners=8))
    line = adaptive.bill(policy, works, at_once, estimates, runners=8)
    assert ", 3 runner(s) at once: A100 2, T4 1 (asked the cluster; earlier records, else" in line
    assert adaptive.bill(policy, works, AtOnce({"A100": 0, "T4": 1}), estimates, runners=8).count("A100 0") == 1


def test_the_budget_charges_each_runner_its_start(tmp_path):
    """Two images, two repeats each: four runners (a repeat index of an image) of one process each. Processes
    estimated at 1 s, a runner's start at 30 s: a 40 s budget admits one runner, where counting the processes
    alone admitted all four (4 s)."""
    class Stub:
        def __call__(self, work, repeat):
            return 1.0

        def start_s(self, works):
            return 30.0, True

    matrix = _matrix(tmp_path, models=["vit"])
    works = [dataclasses.replace(work, pending=work.pending[:1] + work.pending[-1:])
             for work in pending_work(matrix, tmp_path / "results" / "r1")]
    assert [len(work.pending) for work in works] == [2, 2] and {r.index for r in works[0].pending} == {0, 2}
    waves = adaptive.Waves(adaptive.policy_of(matrix), works, adaptive.Budget(40.0, clock=lambda: 0.0),
                           estimates=Stub(), read=lambda work, cell, maximum: adaptive.Processes())
    wave = waves._admitted([(work, list(work.pending)) for work in works])
    assert sum(len(work.pending) for work in wave) == 1 and waves.outcome.held_back == 3


@pytest.mark.parametrize("gpu, visible, at_once", [
    (None, None, "8 runner(s) at once"),          # slots auto on a GPU run: one per GPU nvidia-smi lists
    ("0,1", None, "2 runner(s) at once"),         # --gpu chooses two of them
    (None, "3", "one runner at a time"),          # CUDA_VISIBLE_DEVICES one
    ("9", None, "one runner at a time"),          # not on this host: none placed (the run then refuses it)
])
def test_the_bill_of_a_gpu_run_counts_one_runner_per_gpu_it_places(tmp_path, monkeypatch, gpu, visible, at_once):
    """The GPU-only branch of the bill's runners at once (slots.gpus_placed), against the recorded nvidia-smi
    output of an 8-GPU A100 host (tests/data/a100x8-*)."""
    from matrixbench import gpu as gpu_module
    from test_doctor import smi

    monkeypatch.setattr(gpu_module, "run_command", smi("a100x8"))
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    matrix = load_matrix(write_matrix(tmp_path), Overrides(models=["vit"]))
    text = describe_plan(matrix, tmp_path / "results" / "r1", False, False, device="cuda", gpu=gpu)
    assert at_once in text.splitlines()[-1]
