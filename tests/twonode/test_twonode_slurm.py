"""A real two-node Slurm (``scripts/twonode.sh slurm``): slurmctld on the login node, one slurmd
in each node's namespaces, one slurm.conf of two nodes. ``srun -N 2`` and ``sbatch -N 2`` of
every CPU template in ``slurm/`` run across both nodes; the resolver reads Slurm's real
multi-node variables (uneven tasks per node included); a preempted two-node job checkpoints
once, requeues and resumes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import ROOT, clean_env, read_log
from tests.slurm.preemption import check_preempted_job_resumes
from tests.twonode.conftest import SCRIPT

PATH = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"


class TwoNodeSlurm:
    """Runs Slurm commands on the login node of the two-node cluster."""

    @staticmethod
    def _environ(timeout: float, **env: str) -> dict[str, str]:
        """The environment without hpcdist's and Slurm's, ``env`` added, bounded by ``timeout``."""
        environ = clean_env(PATH=PATH, PYTHONDONTWRITEBYTECODE="1", **env)
        environ["TWONODE_LIMIT"] = str(int(timeout))
        return environ

    def run(self, cmd: list[str], timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
        """``cmd`` (srun, sbatch, scontrol...) on the login node, bounded; text output."""
        return subprocess.run(
            ["bash", SCRIPT, "slurm", *cmd],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout + 30,
            env=self._environ(timeout, **env),
            cwd=ROOT,
        )

    def start(self, cmd: list[str], timeout: float = 240, **env: str) -> subprocess.Popen:
        """``cmd`` on the login node in the background (bounded by ``timeout``); text pipes."""
        return subprocess.Popen(
            ["bash", SCRIPT, "slurm", *cmd],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            env=self._environ(timeout, PYTHON=sys.executable, **env),
            cwd=ROOT,
        )

    def sbatch(self, args: list[str], out: Path, timeout: float = 240, **env: str) -> str:
        """``sbatch --wait`` with ``args``; asserts exit code 0 and returns the job's output.

        A job that fails or outlives ``timeout`` (exit code 124) fails the test with what Slurm
        knew then: the job's record, the nodes, the queue and its steps, this machine's Slurm and
        Python processes, and the end of slurmctld's and the slurmds' logs.
        """
        job = self.run(
            ["sbatch", "--wait", f"--output={out}", *args], timeout, PYTHON=sys.executable, **env
        )
        text = read_log(out)
        assert job.returncode == 0, (
            f"sbatch --wait exited with {job.returncode}\n{job.stdout}{job.stderr}"
            f"--- job output ---\n{text}\n{self.state(job.stdout)}"
        )
        return text

    def state(self, submitted: str) -> str:
        """What Slurm shows now of the job ``sbatch`` reported in ``submitted``, for a failure."""
        ids = re.findall(r"Submitted batch job (\d+)", submitted)
        commands = [["scontrol", "show", "job", ids[-1]]] if ids else []
        commands += [["sinfo", "-N", "-l"], ["squeue", "-a", "-l"], ["squeue", "-a", "-s"]]
        parts = []
        for cmd in commands:
            try:
                shown = self.run(cmd, 20)
                parts.append(f"--- {' '.join(cmd)} ---\n{shown.stdout}{shown.stderr}")
            except subprocess.TimeoutExpired:
                parts.append(f"--- {' '.join(cmd)}: no answer in 20 s ---")
        listing = subprocess.run(
            ["ps", "-eo", "pid,ppid,etimes,pcpu,stat,args"], capture_output=True, text=True
        ).stdout.splitlines()
        mine = [line for line in listing if re.search(r"srun|slurmstepd|hpcdist|python", line)]
        parts.append("--- processes ---\n" + "\n".join(line[:300] for line in mine[:60]))
        state = Path(os.environ.get("TWONODE_STATE", "/tmp/hpcdist-twonode"))
        for name in ("slurmctld", "slurmd-node-a", "slurmd-node-b"):
            tail = read_log(state / "slurm" / f"{name}.log").splitlines()[-40:]
            parts.append(f"--- {name}.log (last 40 lines) ---\n" + "\n".join(tail))
        return "\n".join(parts)


@pytest.fixture(scope="module")
def slurm(cluster) -> Iterator[TwoNodeSlurm]:
    if shutil.which("slurmctld") is None and shutil.which("apt-get") is None:
        pytest.skip("no Slurm packages and no apt-get to install them")
    up = subprocess.run(
        ["bash", SCRIPT, "slurm", "up"], capture_output=True, text=True, timeout=300
    )
    assert up.returncode == 0, up.stdout + up.stderr  # root, namespaces and apt: it must work
    try:
        yield TwoNodeSlurm()
    finally:
        subprocess.run(["bash", SCRIPT, "slurm", "down"], timeout=60)


def rows_of(text: str) -> list[dict]:
    rows = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    return sorted(rows, key=lambda row: row["mpi"][0])


def test_srun_across_two_nodes_with_3_plus_1_tasks(slurm, tmp_path):
    hostfile = tmp_path / "hosts"  # task i on line i's node: 3 tasks on node-a, 1 on node-b
    hostfile.write_text("node-a\nnode-a\nnode-a\nnode-b\n")
    script = "tests/slurm/scripts_resolver.py"
    job = slurm.run(
        ["srun", "-n", "4", "--distribution=arbitrary", "--mpi=pmi2", sys.executable, script],
        SLURM_HOSTFILE=str(hostfile),
    )
    assert job.returncode == 0, job.stderr
    rows = rows_of(job.stdout)
    assert [row["mpi"] for row in rows] == [[i, 4] for i in range(4)], job.stdout
    assert [row["node"] for row in rows] == [["node-a", 0]] * 3 + [["node-b", 1]]
    assert all(row["step"] == ["node-a,node-b", "3,1"] for row in rows), rows[0]["step"]
    assert [row["rank"] for row in rows] == [[i, 4, 2] for i in range(4)]
    assert [row["local"] for row in rows] == [[0, 0, 3], [1, 1, 3], [2, 2, 3], [0, 0, 1]]
    # 6 GPUs a node: 3 tasks on node-a get 2 each, node-b's one task starts again at GPU 0
    assert [row["bound"] for row in rows] == [["0", "1"], ["2", "3"], ["4", "5"], ["0", "1"]]
    assert [host.split(":")[0] for host in rows[0]["hosts"]] == ["node-a"] * 3 + ["node-b"]
    assert [row["task"] for row in rows] == [["worker", i, i == 0] for i in range(4)]


def test_hpcdist_info_reports_two_nodes(slurm):
    job = slurm.run(["srun", "-N", "2", "-n", "4", "--mpi=pmi2", "hpcdist", "info"])
    assert job.returncode == 0, job.stderr
    assert "ranks:            4 on 2 node(s) (node-a, node-b)" in job.stdout, job.stdout
    assert "SlurmClusterResolver" in job.stdout, job.stdout


def test_sbatch_cpu_template_and_hpcdist_run_on_two_nodes(slurm, tmp_path):
    text = slurm.sbatch(
        ["-N", "2", "--ntasks-per-node=2", "slurm/train-cpu.sbatch"],
        tmp_path / "cpu.out",
        SCRIPT="examples/digits.py",
        SCRIPT_ARGS="--epochs 3 --verbose 0",
    )
    assert "digits: 4 replica(s), 3 epochs" in text, text
    wrapped = f"{Path(sys.executable).parent}/hpcdist run -n 4 examples/allreduce_check.py"
    text = slurm.sbatch(["-N", "2", "-n", "4", "--wrap", wrapped], tmp_path / "run.out")
    assert "allreduce check passed on 4 ranks (2 node(s))" in text, text


def test_sbatch_parameter_server_template_on_two_nodes(slurm, tmp_path):
    # --distribution=cyclic, as the template advises: the two ps land on different nodes
    text = slurm.sbatch(
        ["-N", "2", "-n", "5", "--distribution=cyclic", "slurm/parameter-server.sbatch"],
        tmp_path / "ps.out",
    )
    assert "embedding table (7, 64) in 2 shards on the ps ranks" in text, text
    assert "Finished epoch 3, accuracy is" in text, text
    assert "checkpoint restore of the sharded table: ok" in text, text


def test_sbatch_tf1_template_on_two_nodes(slurm, tmp_path):
    logs = tmp_path / "logs"
    text = slurm.sbatch(
        ["-N", "2", "-n", "4", "slurm/tf1-ps.sbatch"],
        tmp_path / "tf1.out",
        CHECKPOINT_DIR=str(logs),
    )
    for task in (0, 1):
        assert f"worker {task} runs" in text and "global_step 200" in text, text
    assert (logs / "model.ckpt-200.h5").exists()


def test_preempted_two_node_job_checkpoints_requeues_and_resumes(slurm, tmp_path):
    log = check_preempted_job_resumes(
        slurm.run, tmp_path, ["-N", "2", "-n", "2"], ["-N", "2", "--ntasks-per-node=1"]
    )
    saved = set(re.findall(r"preemption signal: saved (\S+) after (\d+) steps", log))
    assert len(saved) == 1, log  # every rank that says so names one checkpoint and step


FT_SCRIPT = "tests/twonode/scripts/ps_ft_slurm.py"


def test_fault_tolerant_template_restarts_a_killed_worker_in_a_job_step(slurm, tmp_path):
    # Workers start on node-b (the server step keeps node-a); each one's first start dies.
    text = slurm.sbatch(
        ["slurm/ps-fault-tolerant.sbatch"],
        tmp_path / "ft.out",
        SCRIPT=FT_SCRIPT,
        WORKER_RESTARTS="1",
        FT_DIE_ON="node-b",
    )
    assert "CHECK slurm_every_function PASS" in text and "CHECK slurm_counted PASS" in text, text
    assert "COORDINATOR node-a" in text, text
    assert re.search(r"worker \d exited with code 137; restarting it \(1 of 1\)", text), text
    assert re.search(r"worker \d \(rank \d\) died; its functions run again", text), text


def test_workers_of_a_lost_node_are_restarted_on_the_other_node(slurm, tmp_path):
    # node-b is lost (its processes killed, its link down) once every worker has joined: the
    # coordinator notices through TCP keepalive, Slurm ends the lost steps (SlurmdTimeout=10),
    # and the launcher restarts the workers on node-a's free CPUs while training goes on.
    out = tmp_path / "lost.out"
    job = slurm.start(
        ["sbatch", "--wait", f"--output={out}", "slurm/ps-fault-tolerant.sbatch"],
        timeout=240,
        SCRIPT=FT_SCRIPT,
        SCRIPT_ARGS="200 0.2",
        WORKER_RESTARTS="1",
    )
    try:
        deadline = time.monotonic() + 120
        while "JOINED" not in read_log(out):
            assert job.poll() is None and time.monotonic() < deadline, job.communicate()
            time.sleep(0.2)
        subprocess.run(["bash", SCRIPT, "lose", "node-b"], check=True, timeout=60)
        stdout, stderr = job.communicate(timeout=260)
        text = read_log(out)
        assert job.returncode == 0, stdout + stderr + text
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()
        subprocess.run(["bash", SCRIPT, "revive", "node-b"], check=True, timeout=120)
    joined = text.split("JOINED ", 1)[1].splitlines()[0]
    assert joined.count("node-b") == 3, text  # every worker started on node-b
    assert len(re.findall(r"worker \d \(rank \d\) died; its functions run again", text)) == 3
    assert "without being stopped (node failure?); restarting it (1 of 1)" in text, text
    assert "CHECK slurm_every_function PASS" in text and "CHECK slurm_counted PASS" in text, text
    ran_on = text.split("RAN_ON ", 1)[1].splitlines()[0]
    assert "node-a" in ran_on, text  # replacements on the node left
