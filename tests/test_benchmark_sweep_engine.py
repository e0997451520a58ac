"""benchmarks/sweep_engine.py: its arithmetic on made-up measurements, and its target judged on a control."""

from __future__ import annotations

import importlib.util

import pytest

from where223.pipeline.paths import ROOT


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("sweep_engine_benchmark", ROOT / "benchmarks" / "sweep_engine.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rows(count, seconds):
    return [{"model_type": f"m{i}", "outcome": "accepted", "wall_s": seconds} for i in range(count)]


def test_rate_and_overhead_per_cell(bench):
    one = bench.measure("engine-1", 220.0, rows(20, 10.0), 1)
    assert one["cells_per_minute"] == pytest.approx(20 / (220 / 60), abs=0.01)
    assert one["overhead_per_cell_s"] == 1.0  # (1 x 220 - 200) / 20
    two = bench.measure("engine-2", 120.0, rows(20, 10.5), 2)
    assert two["overhead_per_cell_s"] == pytest.approx((2 * 120 - 210) / 20)


def test_the_speedup_target_is_met_or_the_record_says_where_the_time_went(bench):
    one = bench.measure("engine-1", 220.0, rows(20, 10.0), 1)
    fast = bench.measure("engine-2", 120.0, rows(20, 10.5), 2)
    assert bench.judge_speedup(one, fast)["target_met"] is True  # 1.83x
    slow = bench.measure("engine-2", 150.0, rows(20, 12.0), 2)  # the control: 1.47x
    judged = bench.judge_speedup(one, slow)
    assert judged["target_met"] is False and judged["speedup_2_workers"] == pytest.approx(1.47, abs=0.01)
    went = judged["where_the_time_went"]
    assert went["cell_time_growth"] == 1.2 and went["idle_or_overhead_s_2_workers"] == 60.0


def test_the_projection_scales_the_measured_cost_per_cell(bench):
    two = bench.measure("engine-2", 120.0, rows(20, 10.5), 2)
    projected = bench.projection(two, mean_cell_s=12.0, cells=1000, workers=(2, 10))
    per_cell = 12.0 + two["overhead_per_cell_s"]
    assert projected["minutes"] == {"2": round(1000 * per_cell / 2 / 60, 1), "10": round(1000 * per_cell / 10 / 60, 1)}


def test_the_twenty_cells_are_every_seventh_committed_model_type(bench):
    types = bench.model_types()
    assert len(types) == 20 and types[0] == "albert" and len(set(types)) == 20
