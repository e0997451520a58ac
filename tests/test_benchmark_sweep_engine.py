"""benchmarks/sweep_engine.py: its arithmetic on made-up measurements, and its targets judged on a control."""

from __future__ import annotations

import pytest

from tests import benchmark_records, benchmark_scripts
from where223.pipeline import records


@pytest.fixture(scope="module")
def bench():
    return benchmark_scripts.load("sweep_engine")


def rows(count, seconds, overhead=1.0, kind="cold"):
    return [{"cell": f"m{i} r e", "outcome": "accepted", "wall_s": seconds, "timings_s": {"build-small": 2.0},
             "engine": {"kind": kind, "overhead_s": overhead}} for i in range(count)]  # fmt: skip


def test_rate_and_overheads_per_cell(bench):
    one = bench.measure("cold-1", 220.0, rows(20, 10.0, overhead=4.5), 1)
    assert one["cells_per_minute"] == pytest.approx(20 / (220 / 60), abs=0.01)
    assert one["overhead_per_cell_s"] == 1.0  # (1 x 220 - 200) / 20
    assert one["median_cell_overhead_s"] == 4.5 and one["median_build_s"] == 2.0 and one["engine"] == "cold"
    two = bench.measure("warm-2", 120.0, rows(20, 10.5, kind="warm"), 2)
    assert two["overhead_per_cell_s"] == pytest.approx((2 * 120 - 210) / 20) and two["ran_by"] == ["warm"]


def test_warm_over_cold_is_judged_against_its_target_and_the_outcomes_compared(bench):
    cold = bench.measure("cold-1", 220.0, rows(20, 10.0), 1)
    fast = bench.measure("warm-1", 140.0, rows(20, 6.0, kind="warm"), 1)
    judged = bench.judge_warm({"cold-1": cold, "warm-1": fast})["warm_over_cold"]
    assert judged["workers"] == {"1": 1.57} and judged["target_met"] is True and judged["outcomes_agree"]["1"]
    slow = bench.measure("warm-1", 160.0, rows(20, 7.0, kind="warm"), 1)  # the control: 1.38x
    slow["outcomes"]["m0 r e"] = "type_error"
    judged = bench.judge_warm({"cold-1": cold, "warm-1": slow})["warm_over_cold"]
    assert judged["target_met"] is False and judged["outcomes_agree"] == {"1": False}


def test_the_speedup_target_is_met_or_the_record_says_where_the_time_went(bench):
    one = bench.measure("warm-1", 220.0, rows(20, 10.0), 1)
    fast = bench.measure("warm-2", 120.0, rows(20, 10.5), 2)
    assert bench.judge_speedup(one, fast)["target_met"] is True  # 1.83x
    slow = bench.measure("warm-2", 150.0, rows(20, 12.0), 2)  # the control: 1.47x
    judged = bench.judge_speedup(one, slow)
    assert judged["target_met"] is False and judged["speedup_2_workers"] == pytest.approx(1.47, abs=0.01)
    went = judged["where_the_time_went"]
    assert went["cell_time_growth"] == 1.2 and went["idle_or_overhead_s_2_workers"] == 60.0


def test_the_class_space_is_scaled_from_the_measured_seconds_per_cell(bench):
    two = bench.measure("warm-2", 120.0, rows(20, 10.5), 2)
    projected = bench.class_space({"warm-2": two}, cells=3600)["warm-2"]
    assert projected["seconds_per_cell"] == 12.0 and projected["worker_hours"] == 12.0
    assert projected["hours"] == {"2": 6.0, "8": 1.5, "32": 0.4}


def test_the_cells_are_spread_over_the_class_space(bench):
    from where223.sweep.space import load_space

    cells = bench.chosen_cells(load_space(bench.SPACE))
    assert len(cells) == bench.CELL_COUNT == len({cell.model for cell in cells})
    assert {cell.recipe for cell in cells} == {"cpu_bf16_autocast", "bf16_model", "fp16_model"}
    assert {cell.exporter for cell in cells} == {"dynamo", "torchscript"}


def test_the_written_record_is_one_run_of_the_configurations_it_measured(bench, tmp_path, monkeypatch):
    made = {"cold-1": (220.0, "cold"), "warm-1": (140.0, "warm")}
    monkeypatch.setattr(bench, "run_configuration", lambda space, engine, workers, scratch: (
        made[f"{engine}-{workers}"][0], rows(len(space.cells), 6.0, kind=engine)))
    monkeypatch.setattr(bench, "probe_preload", lambda space: {"torch_import_s": 1.0, "imported": {}, "import_s": 1.0})
    monkeypatch.setattr(bench, "committed_rebuild", lambda: {})
    out = tmp_path / "outputs" / "benchmarks" / "sweep_engine.json"
    assert bench.main(["--only", "cold-1,warm-1", "--out", str(out)]) == 0
    record = records.read_json(out)
    assert list(record["configurations"]) == ["cold-1", "warm-1"] and "speedup_2_workers" not in record
    assert record["run"]["started_at"] <= record["recorded_at"] and benchmark_records.problems(record) == []
