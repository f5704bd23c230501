"""tests/scheduling.py: the order the workers take the modules in."""

from types import SimpleNamespace

import scheduling


def test_the_modules_that_import_transformers_are_one_scope_and_others_their_own_module():
    assert scheduling.scope_of("tests/test_trainer_data.py::test_a") == "transformers"
    assert scheduling.scope_of("tests/test_trainer_sizes.py::test_b[x]") == "transformers"
    assert scheduling.scope_of("tests/test_caption_engines.py::test_c") == "transformers"
    assert scheduling.scope_of("tests/test_cli.py::test_c") == "tests/test_cli.py"


def test_costliest_scope_first_by_its_selected_tests_and_new_scopes_before_all(monkeypatch):
    costs = {
        "tests/test_a.py::one": 1.0,
        "tests/test_a.py::two": 1.0,
        "tests/test_b.py::one": 4.0,
        "tests/test_b.py::slow": 50.0,  # not selected in this run: it does not count
        "tests/test_trainer_x.py::one": 3.0,  # with trainer_y's unknown test (the median, 3.0)
    }
    monkeypatch.setattr(scheduling, "read_costs", lambda: costs)
    names = [
        "tests/test_a.py::one",
        "tests/test_a.py::two",
        "tests/test_b.py::one",
        "tests/test_new.py::one",
        "tests/test_trainer_x.py::one",
        "tests/test_trainer_y.py::one",
    ]
    items = [SimpleNamespace(nodeid=name) for name in names]
    scheduling.pytest_collection_modifyitems(None, items)
    assert [item.nodeid for item in items] == [
        "tests/test_new.py::one",
        "tests/test_trainer_x.py::one",
        "tests/test_trainer_y.py::one",
        "tests/test_b.py::one",
        "tests/test_a.py::one",
        "tests/test_a.py::two",
    ]


def test_a_missing_or_broken_costs_file_keeps_the_collection_order(tmp_path, monkeypatch):
    monkeypatch.setattr(scheduling, "COSTS", tmp_path / "costs.json")
    assert scheduling.read_costs() == {}
    (tmp_path / "costs.json").write_text("[1, 2")
    assert scheduling.read_costs() == {}
    (tmp_path / "costs.json").write_text('{"tests/test_a.py": 2.5}')
    assert scheduling.read_costs() == {"tests/test_a.py": 2.5}
