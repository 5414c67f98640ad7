"""The process's Dagster instance (dagster_runs.instance.get_instance): one per instance
folder."""

from __future__ import annotations

import threading

from stash_pipeline.dagster_runs.instance import get_instance


def test_one_instance_per_folder_shared_by_threads(use_stash_home, tmp_path, monkeypatch) -> None:
    """Eight threads (the API's request threads) asking at once get one instance; another
    instance folder gets its own, and the first still answers afterwards."""
    use_stash_home(tmp_path / "first")
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(get_instance())) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    first = got[0]
    assert all(instance is first for instance in got) and get_instance() is first
    assert first.root_directory == str((tmp_path / "first" / "dagster").resolve())

    use_stash_home(tmp_path / "second")
    monkeypatch.delenv("DAGSTER_HOME")  # the first call set it to the first folder
    second = get_instance()
    assert second is not first
    assert second.root_directory == str((tmp_path / "second" / "dagster").resolve())
    assert first.get_runs(limit=1) == []  # not disposed: a caller may still hold it


def test_the_ui_opens_without_dagsters_first_visit_dialog(use_stash_home, tmp_path) -> None:
    use_stash_home(tmp_path / "home")
    assert get_instance().nux_enabled is False

