"""The driver hands cells to Dask a window at a time, in the space's order (an in-process cluster, the cells'
work replaced by an instant record): never more than the window in the cluster's hands, none out of order."""

from __future__ import annotations

from pathlib import Path

import pytest

from where223.sweep import driver
from where223.sweep.space import load_space


def _space(tmp_path: Path):
    path = tmp_path / "space.yaml"
    path.write_text(
        "study: window-test\nrecords: 'window/{model}-{recipe}-{exporter}.json'\nrunner: where223.study.matrix.run\n"
        "timeout_s: 60\nstacks: [project]\nmodels: [control-sleep, control-exit]\n"
        "recipes: [cpu_bf16_autocast, bf16_model, fp16_model]\nexporters: [torchscript, dynamo]\n"
    )
    return load_space(path)


@pytest.fixture
def in_process(monkeypatch):
    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None,
                           silence_logs=40)
    client = Client(cluster, set_as_default=False)
    events: list[tuple[str, str]] = []
    submit = client.submit

    def spied(function, cell_key, *args, **kwargs):
        events.append(("submitted", cell_key["model"] + cell_key["recipe"] + cell_key["exporter"]))
        return submit(function, cell_key, *args, **kwargs)

    def instant(key, space, timeout_s, threads=1, runner=None):
        return {"key": dict(key), "outcome": "accepted", "recorded_by": "cell"}

    def published(path, record, output_root):
        key = record["key"]
        events.append(("published", key["model"] + key["recipe"] + key["exporter"]))

    monkeypatch.setattr(client, "submit", spied)
    monkeypatch.setattr(driver, "connect", lambda scheduler, workers: (client, cluster))
    monkeypatch.setattr(driver, "execute", instant)
    monkeypatch.setattr(driver.publish, "write_record", published)
    yield events
    client.close()
    cluster.close()


def test_cells_go_a_window_at_a_time_in_the_spaces_order(tmp_path, in_process):
    """One single-threaded worker: at most 2 cells in its hands at once, submitted in the space's order."""
    space = _space(tmp_path)
    assert driver.window(driver.connect(None, None)[0]) == 2
    counts = driver.run(space, output_root=tmp_path / "out")
    assert sum(counts.values()) == len(space.cells) == 12
    submitted = [name for kind, name in in_process if kind == "submitted"]
    assert submitted == [c.model + c.recipe + c.exporter for c in space.cells]
    assert _peak(in_process) <= 2


def _peak(events: list[tuple[str, str]]) -> int:
    in_hands = peak = 0
    for kind, _ in events:
        in_hands += 1 if kind == "submitted" else -1
        peak = max(peak, in_hands)
    return peak


def test_the_window_check_fails_on_all_at_once(tmp_path, in_process, monkeypatch):
    """The control: a window as large as the space, as the driver before it, hands every cell over at once."""
    monkeypatch.setattr(driver, "window", lambda client: 12)
    driver.run(_space(tmp_path), output_root=tmp_path / "out")
    assert _peak(in_process) == 12
