"""Brokers of a scenario's or a test's own, from docker/kafka/broker.sh: one node (for the
scenarios that restart it) or a three-node cluster (leader kills, a node started again)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import ROOT

__all__ = ["Cluster", "QuorumStatus", "own_broker", "own_cluster"]

SCRIPT = str(ROOT / "docker" / "kafka" / "broker.sh")
#: The jars, fetched once into the repository's .kafka/ and shared by every broker home.
SHARED_LIB = ROOT / ".kafka" / "lib"


@contextmanager
def own_broker(port: int) -> Iterator[str]:
    """A fresh single-node broker on 127.0.0.1:``port``; stopped and deleted afterwards."""
    env = dict(os.environ, KAFKA_PORT=str(port), KAFKA_CONTROLLER_PORT=str(port + 1), PYTHON=sys.executable)
    for action in ("reset", "start"):
        done = subprocess.run([SCRIPT, action], env=env, cwd=ROOT, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"broker.sh {action} on port {port} failed:\n{done.stderr[-3000:]}")
    try:
        yield f"127.0.0.1:{port}"
    finally:
        subprocess.run([SCRIPT, "reset"], env=env, check=False, cwd=ROOT, capture_output=True)
        shutil.rmtree(ROOT / ".kafka" / f"run-{port}", ignore_errors=True)


@dataclass(frozen=True)
class QuorumStatus:
    """The KRaft metadata quorum as its leader reports it (``kafka-metadata-quorum.sh describe
    --status``): the node id of the active controller and its epoch (one more per election)."""

    leader: int
    epoch: int


@dataclass(frozen=True)
class Cluster:
    """A local KRaft cluster of ``broker.sh`` (``KAFKA_NODES``): node ``n`` serves clients on
    ``port + n - 1`` and its controller on ``controller_port + n - 1``; node ids are 1..nodes."""

    port: int
    controller_port: int
    home: Path
    nodes: int = 3

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.port + i}" for i in range(self.nodes))

    def env(self) -> dict[str, str]:
        return dict(
            os.environ,
            KAFKA_NODES=str(self.nodes),
            KAFKA_PORT=str(self.port),
            KAFKA_CONTROLLER_PORT=str(self.controller_port),
            KAFKA_HOME_DIR=str(self.home),
            KAFKA_LIB_DIR=str(SHARED_LIB),
            PYTHON=sys.executable,
        )

    def run(self, *args: str) -> str:
        """``broker.sh ARGS`` for this cluster: its output; RuntimeError with its errors if it fails."""
        done = subprocess.run([SCRIPT, *args], env=self.env(), cwd=ROOT, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(
                f"broker.sh {' '.join(args)} (cluster on {self.port}) failed ({done.returncode}):\n"
                f"{done.stdout[-1500:]}{done.stderr[-3000:]}"
            )
        return done.stdout

    def kill_node(self, node: int) -> None:
        """SIGKILL of node ``node`` (its data stays)."""
        self.run("kill-node", str(node))

    def start_node(self, node: int) -> None:
        """Node ``node`` again, on its data; returns once it serves."""
        self.run("start-node", str(node))

    def quorum_status(self) -> QuorumStatus:
        """The active controller, from Kafka's own ``MetadataQuorumCommand`` (the tool behind
        ``kafka-metadata-quorum.sh``) run on the shared jars against the client ports: the
        ``controller_id`` of a KRaft broker's metadata answer is any live broker, not the quorum
        leader. RuntimeError if the tool fails or prints no leader."""
        java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else "java"
        command = [java, "-Xmx128m", "-cp", f"{SHARED_LIB}/*", "org.apache.kafka.tools.MetadataQuorumCommand"]
        command += ["--bootstrap-server", self.bootstrap, "describe", "--status"]
        try:
            done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"MetadataQuorumCommand (cluster on {self.port}): no answer in 120 s") from exc
        fields = dict(re.findall(r"^(LeaderId|LeaderEpoch):\s*(-?\d+)\s*$", done.stdout, re.MULTILINE))
        if done.returncode != 0 or len(fields) != 2:
            raise RuntimeError(
                f"MetadataQuorumCommand (cluster on {self.port}) failed ({done.returncode}):\n"
                f"{done.stdout[-1500:]}{done.stderr[-3000:]}"
            )
        return QuorumStatus(int(fields["LeaderId"]), int(fields["LeaderEpoch"]))

    def node_log(self, node: int) -> Path:
        return self.home / f"cluster-{self.port}" / f"node-{node}" / "logs" / "kafka.out"


@contextmanager
def own_cluster(port: int, controller_port: int, home: Path, nodes: int = 3) -> Iterator[Cluster]:
    """A fresh cluster of ``nodes`` (started, ready for a replicated round trip); every node
    stopped and its data deleted afterwards, also when the start fails."""
    cluster = Cluster(port, controller_port, home, nodes)
    try:
        cluster.run("reset")
        cluster.run("start")
        yield cluster
    finally:
        subprocess.run([SCRIPT, "reset"], env=cluster.env(), check=False, cwd=ROOT, capture_output=True)
