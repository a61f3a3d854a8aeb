"""The harness's reading of handler records while workers still write them."""

from __future__ import annotations

from tests.reliability.harness import read_executions


def test_a_record_line_still_being_written_is_left_for_the_next_read(tmp_path):
    done = "S\tt1\t1\t7\t1.000000\t2.000000\tt1\nF\tt1\t1\t7\t1.500000\t2.000000\tt1\n"
    (tmp_path / "rec.7").write_text(done + "S\tt2\t1")  # a worker's os.write half seen
    runs = read_executions(tmp_path)
    assert list(runs) == ["t1"] and runs["t1"][0].finished == 1.5
    (tmp_path / "rec.7").write_text(done + "S\tt2\t1\t7\t3.000000\t4.000000\tt2\n")
    assert sorted(read_executions(tmp_path)) == ["t1", "t2"]


def test_a_payload_with_a_line_separator_of_unicode_stays_one_record(tmp_path):
    (tmp_path / "rec.7").write_bytes("S\tt1\t1\t7\t1.000000\t2.000000\ta\u2028b\x1cc\rd\n".encode())
    assert read_executions(tmp_path)["t1"][0].payload == "a\u2028b\x1cc\rd"
