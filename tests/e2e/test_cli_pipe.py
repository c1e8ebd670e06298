"""A command whose reader goes away (``python -m analyses.zoo --list | head``) stops quietly."""

import subprocess
import sys


def test_a_closed_pipe_is_no_traceback(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "analyses.zoo", "--list", "--cache-dir",
                             str(tmp_path / "c")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before the first line is written
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err
