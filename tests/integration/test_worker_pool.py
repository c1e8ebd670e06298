"""The reproduce runner forks its jobs from a process that has torch and the suite imported
(seqprobe.sweep.fork): each job keeps a process's isolation — its own process group, log,
exit code, timeout, SIGTERM handling — and starts from a fresh interpreter's torch generator."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from analyses.reproduce.index import run_plan
from analyses.reproduce.plan import Job
from seqprobe.sweep.commands import Running, kill
from seqprobe.sweep.fork import ForkedJob, forkable

MOD = "tests.worker_pool_jobs"
pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork here")


def job(name: str, *args: str) -> Job:
    return Job(name, (sys.executable, "-m", MOD, *args))


def test_only_suite_modules_with_main_are_forked():
    assert forkable((sys.executable, "-m", MOD, "ok")) == MOD
    assert forkable((sys.executable, "-c", "print(1)")) is None
    assert forkable((sys.executable, "-m", "no_such_module_here")) is None
    assert forkable(("/bin/echo", "-m", MOD)) is None


def test_exit_codes_logs_and_failures_stay_in_their_job(tmp_path):
    jobs = [job("ok", "ok"), job("code", "code", "4"), job("raise", "raise"),
            job("text", "exit-text"), job("segv", "segv")]
    out = {o.job.name: o for o in run_plan(jobs, tmp_path, workers=2)}
    assert out["ok"].ok and not any(out[n].ok for n in ("code", "raise", "text", "segv"))
    assert "(exit code 4)" in out["code"].log_tail
    assert "ValueError: boom in the job" in out["raise"].log_tail
    assert "a message" in out["text"].log_tail and "(exit code 1)" in out["text"].log_tail
    assert f"(exit code {-signal.SIGSEGV})" in out["segv"].log_tail
    log = (tmp_path / "logs" / "ok.log").read_text()
    pid, pgid = (int(w) for w in log.split()[1:4:2])
    assert pid == pgid != os.getpgid(0)  # its own process group, as a subprocess had
    assert "threads 1 omp 1" in log  # the job's share of the cores, as its environment says


def test_forked_jobs_seed_their_unseeded_generators_afresh(tmp_path):
    """Two processes draw different unseeded numbers; two forks of one process would draw the
    same, so each job seeds torch (and numpy, random) afresh as a new interpreter does."""
    run_plan([job("a", "ok"), job("b", "ok")], tmp_path, workers=2)
    draws = {(tmp_path / "logs" / f"{n}.log").read_text().split("rand ")[1].split()[0]
             for n in "ab"}
    assert len(draws) == 2


def test_a_timeout_kills_the_forked_job(tmp_path):
    t = time.time()
    [o] = run_plan([job("slow", "sleep", "60")], tmp_path, timeout=1.0)
    assert not o.ok and "timed out" in o.log_tail and time.time() - t < 20


def test_sigterm_reaches_the_jobs_own_handler(tmp_path):
    """A stop (Ctrl-C / SIGTERM of the run) sends SIGTERM with a grace period; the job's own
    handler (the training loop's saves its checkpoint) runs, not the runner's."""
    log = tmp_path / "j.log"
    proc = ForkedJob(MOD, ["sigterm"], log, {"OMP_NUM_THREADS": "1"}, 1)
    for _ in range(200):
        if log.exists() and "waiting" in log.read_text():
            break
        time.sleep(0.05)
    kill(Running(job("j", "sigterm"), proc, log, time.time(), 1), grace=10)
    assert proc.returncode == 3 and "saved on SIGTERM" in log.read_text()


def test_a_job_that_ignores_sigterm_is_killed_after_the_grace(tmp_path):
    proc = ForkedJob(MOD, ["sleep", "60"], tmp_path / "s.log", {}, 1)
    t = time.time()
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.2)
    kill(Running(job("s", "sleep", "60"), proc, tmp_path / "s.log", t, 1), grace=0.5)
    assert proc.returncode is not None and time.time() - t < 10


def test_a_stop_also_ends_what_the_job_started(tmp_path):
    """A job's workers (joblib's, say) may outlive the SIGTERM that stops the job; the stop
    kills its whole process group once the grace is over or the job has ended."""
    pidfile = tmp_path / "worker.pid"
    code = ("import subprocess, sys, time; "
            "p = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
            "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)']); "
            f"open({str(pidfile)!r}, 'w').write(str(p.pid)); time.sleep(60)")
    job = Job("j", (sys.executable, "-c", code))
    proc = subprocess.Popen(list(job.argv), start_new_session=True)
    for _ in range(200):
        if pidfile.exists() and pidfile.read_text():
            break
        time.sleep(0.05)
    worker = int(pidfile.read_text())
    kill(Running(job, proc, tmp_path / "j.log", time.time(), 1), grace=5)
    for _ in range(100):
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(worker, signal.SIGKILL)
        pytest.fail("the job's worker outlived the stop")


def test_run_command_stops_a_command_at_its_timeout_sigterm_first():
    """seqprobe.sweep.run_command: one command in its own group, stopped at its timeout —
    SIGTERM ``grace`` seconds before it (a handler may save and exit), SIGKILL at it — with
    its output kept, and whatever its group left running killed once it has ended."""
    from seqprobe.sweep import run_command

    done = run_command([sys.executable, "-c", "import sys; print('out'); "
                        "print('err', file=sys.stderr); sys.exit(3)"])
    assert (done.returncode, done.stdout, done.stderr, done.stopped_by) == (3, "out\n",
                                                                            "err\n", None)
    lines: list[str] = []
    trap = ("import signal, sys, time\n"
            "signal.signal(signal.SIGTERM, lambda *a: (print('saved', flush=True), "
            "sys.exit(0)))\nprint('up', flush=True)\ntime.sleep(60)\n")
    t0 = time.time()
    done = run_command([sys.executable, "-c", trap], timeout=3.0, grace=1.5, output="lines",
                       on_line=lines.append)
    assert done.stopped_by == "SIGTERM" and done.returncode == 0 and lines == ["up", "saved"]
    assert time.time() - t0 < 10
    stubborn = run_command([sys.executable, "-c", "import time; time.sleep(60)"], timeout=0.5)
    assert stubborn.stopped_by == "SIGKILL" and stubborn.returncode == -signal.SIGKILL


def test_run_command_leaves_nothing_of_its_group_running(tmp_path):
    from seqprobe.sweep import run_command

    pid_file = tmp_path / "pid"
    code = ("import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', "
            "'import time; time.sleep(60)']); "
            f"open({str(pid_file)!r}, 'w').write(str(p.pid))")
    assert run_command([sys.executable, "-c", code]).returncode == 0
    pid = int(pid_file.read_text())
    for _ in range(50):  # the group was sent SIGKILL; reaped by init shortly after
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the command's child outlived it")
