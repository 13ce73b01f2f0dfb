"""The order file of a run (run.py): one node id a line, a test at most twice in a row."""

import fixgate_plugin_run as run


def test_an_order_lists_its_node_ids_in_order_without_blank_lines_or_carriage_returns():
    text = "\ufefftests/a.py::t\r\n\n  \ntests/b.py::t\ntests/c.py::t[1-2]\n"
    # The BOM is the file reader's (utf-8-sig); the text itself keeps what follows it.
    ids, dups = run._order_ids(text.lstrip("\ufeff"))
    assert ids == ["tests/a.py::t", "tests/b.py::t", "tests/c.py::t[1-2]"]
    assert dups == []


def test_a_test_listed_twice_in_a_row_runs_twice_and_anywhere_else_is_a_mistake():
    ids, dups = run._order_ids("a\na\nb\n")
    assert (ids, dups) == (["a", "a", "b"], [])
    ids, dups = run._order_ids("a\na\na\nb\na\n")
    assert ids == ["a", "a", "b"]
    assert dups == ["a", "a"]


def test_a_node_id_of_a_file_whose_name_is_not_utf8_comes_back_as_its_bytes():
    ids, _ = run._order_ids("tests/caf\\xE9.py::t\n")
    assert ids == ["tests/caf\udce9.py::t"]
