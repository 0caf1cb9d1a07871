"""Private files handed between launcher and ranks: whole or absent, readable by the user only."""

import os
import stat

from hpcdist.utils.files import write_private_text


def test_written_whole_with_mode_0600_and_no_temporary_left(tmp_path):
    path = tmp_path / "failure"
    write_private_text(path, "ps 1 (rank 2)\n")
    assert path.read_text() == "ps 1 (rank 2)\n"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert sorted(os.listdir(tmp_path)) == ["failure"]


def test_a_rewrite_replaces_the_old_text_in_one_step(tmp_path):
    path = tmp_path / "rank-0.pid"
    write_private_text(str(path), "123\n")
    before = os.stat(path).st_ino
    write_private_text(str(path), "456\n")
    assert path.read_text() == "456\n"
    assert os.stat(path).st_ino != before  # a new file renamed over, never truncated in place
