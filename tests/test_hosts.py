"""Several processes joined on 127.0.0.1 (gloo): starting, and what is refused before compiling (issue 29)."""

import os
import signal
import socket
import subprocess
import sys

import pytest

from conftest import assert_metrics_csv_within_rounding, run_module_each

TINY = ["train", "cartpole", "--seeds", "2", "--set", "total_timesteps=512", "--set", "num_envs=4",
        "--set", "num_steps=16", "--eval-episodes", "2", "--no-cache"]


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_", "SLURM_", "OMPI_", "PUREJAXPPO_"))}
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=1"
    return {**env, **extra}


def _free_port(low=1024, high=65535) -> int:
    for port in range(low, high + 1):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port")


def start(args_per_process, envs, timeout=300):
    """Start one process per (args, env), -> [(exit code, stdout + stderr)]; all killed at `timeout`."""
    procs = [subprocess.Popen([sys.executable, "-m", "purejaxppo.experiments.cli", *args], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for args, env in zip(args_per_process, envs)]
    try:
        outputs = [p.communicate(timeout=timeout)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return [(p.returncode, out) for p, out in zip(procs, outputs)]


def explicit(count, port):
    return [_env(JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES=str(count), JAX_PROCESS_ID=str(i))
            for i in range(count)]


def errors(output):
    return [line for line in output.splitlines() if line.startswith("purejaxppo: error:")]


BAD_VARIABLES = [
    ({"JAX_COORDINATOR_ADDRESS": "no-port-here", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "0"},
     "JAX_COORDINATOR_ADDRESS='no-port-here': must be host:port"),
    ({"JAX_COORDINATOR_ADDRESS": "127.0.0.1:99999", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "0"},
     "JAX_COORDINATOR_ADDRESS='127.0.0.1:99999': must be host:port"),
    ({"JAX_COORDINATOR_ADDRESS": "127.0.0.1:1234", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "2"},
     "JAX_PROCESS_ID=2: must be below JAX_NUM_PROCESSES=2"),
    ({"JAX_COORDINATOR_ADDRESS": "127.0.0.1:1234", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "-1"},
     "JAX_PROCESS_ID='-1': must be an integer of at least 0"),
    ({"JAX_COORDINATOR_ADDRESS": "127.0.0.1:1234", "JAX_NUM_PROCESSES": "2"},
     "JAX_PROCESS_ID: must be set with JAX_COORDINATOR_ADDRESS"),
    ({"JAX_COORDINATOR_ADDRESS": "127.0.0.1:1234", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "0",
      "PUREJAXPPO_HEARTBEAT_SECONDS": "soon"}, "PUREJAXPPO_HEARTBEAT_SECONDS='soon': must be an integer of at least 1"),
    ({"JAX_COORDINATOR_ADDRESS": "fe80::1:8476", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "0"},
     "JAX_COORDINATOR_ADDRESS='fe80::1:8476': an IPv6 address must be in brackets: [address]:port"),
    ({"JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "1"},
     "JAX_COORDINATOR_ADDRESS: must be set with JAX_NUM_PROCESSES (no cluster detected to tell it)"),
    ({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "2"}, "SLURM_PROCID: must be set with SLURM_JOB_ID and SLURM_NTASKS=2"),
    ({"PUREJAXPPO_CLUSTER": "maybe"}, "PUREJAXPPO_CLUSTER='maybe': must be on or off"),
]


@pytest.fixture(scope="module")
def bad_variables_run(tmp_path_factory):
    """`python -m purejaxppo.experiments.cli` started with each of BAD_VARIABLES (in the environment
    of _env()): (exit code, stdout and stderr as one, the --out it was given) of each, run one after
    the other in one new process (conftest.run_module_each)."""
    outs = [tmp_path_factory.mktemp("bad-variables") / "run" for _ in BAD_VARIABLES]
    results = run_module_each("purejaxppo.experiments.cli", [([*TINY, "--out", str(out)], variables)
                                                             for out, (variables, _) in zip(outs, BAD_VARIABLES)],
                              streams=(1, 2), env=_env(), timeout=len(BAD_VARIABLES) * 100)
    return [(code, output, out) for (code, output), out in zip(results, outs)]


@pytest.mark.parametrize("case", range(len(BAD_VARIABLES)), ids=[says for _, says in BAD_VARIABLES])
@pytest.mark.timeout(len(BAD_VARIABLES) * 120)
def test_bad_process_variables_are_one_line_and_exit_2_with_no_folder(bad_variables_run, case):
    code, output, out = bad_variables_run[case]
    says = BAD_VARIABLES[case][1]
    assert code == 2, output
    assert len(errors(output)) == 1 and says in errors(output)[0], output
    assert "Traceback" not in output
    assert not out.exists()


def test_a_single_process_or_a_one_task_slurm_job_joins_nothing(monkeypatch):
    from purejaxppo.experiments import hosts

    for name in [n for n in os.environ if n.startswith(("JAX_", "SLURM_", "OMPI_"))]:
        monkeypatch.delenv(name)
    assert hosts.init_distributed() is None
    slurm = {"SLURM_JOB_ID": "7", "SLURM_STEP_NODELIST": "localhost", "SLURM_NTASKS": "1", "SLURM_PROCID": "0",
             "SLURM_LOCALID": "0"}
    for name, value in slurm.items():
        monkeypatch.setenv(name, value)
    assert hosts.detected_cluster() is None and hosts.init_distributed() is None  # one task: never waits
    monkeypatch.setenv("SLURM_NTASKS", "2")
    assert hosts.detected_cluster() == "slurm"
    assert hosts.init_distributed(detect=False) is None  # --no-cluster
    monkeypatch.setenv("PUREJAXPPO_CLUSTER", "off")
    assert hosts.init_distributed() is None


@pytest.fixture
def no_join(monkeypatch):
    """No JAX_*, scheduler or PUREJAXPPO_CLUSTER variable; jax.distributed.initialize records its
    calls (-> the list) instead of joining."""
    import jax

    for name in [n for n in os.environ if n.startswith(("JAX_", "SLURM_", "OMPI_", "PUREJAXPPO_CLUSTER"))]:
        monkeypatch.delenv(name)
    calls = []
    monkeypatch.setattr(jax.distributed, "initialize", lambda **options: calls.append(options))
    return calls


JOIN_AS_PROCESS_1 = {"JAX_COORDINATOR_ADDRESS": "127.0.0.1:1234", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "1"}


@pytest.mark.parametrize("off", ["--no-cluster", "PUREJAXPPO_CLUSTER=off", "PUREJAXPPO_CLUSTER=0"])
def test_off_runs_alone_whatever_the_jax_or_scheduler_variables_say(no_join, monkeypatch, off):
    """--no-cluster and PUREJAXPPO_CLUSTER=off: one process alone, process 0, even with every
    JAX_* variable set (to process 1 of 2) and a scheduler's half set: nothing joins or is refused."""
    import jax

    from purejaxppo.experiments import hosts

    for name, value in {**JOIN_AS_PROCESS_1, "SLURM_JOB_ID": "7", "SLURM_NTASKS": "2"}.items():
        monkeypatch.setenv(name, value)
    if off.startswith("PUREJAXPPO_CLUSTER="):
        monkeypatch.setenv("PUREJAXPPO_CLUSTER", off.split("=")[1])
    assert hosts.init_distributed(detect=off != "--no-cluster") is None
    assert no_join == [] and jax.process_index() == 0 and jax.process_count() == 1


@pytest.mark.parametrize("value, on", [("maybe", None), ("of", None), ("ON", True), ("yes", True), ("False", False)])
def test_the_cluster_setting_is_on_or_off_and_nothing_else(no_join, monkeypatch, value, on):
    from purejaxppo.errors import ConfigError
    from purejaxppo.experiments import hosts

    monkeypatch.setenv("PUREJAXPPO_CLUSTER", value)
    if on is None:
        with pytest.raises(ConfigError) as refused:
            hosts.init_distributed()
        assert refused.value.field == "PUREJAXPPO_CLUSTER" and str(refused.value) == (
            f"PUREJAXPPO_CLUSTER={value!r}: must be on or off (also 1 or 0, yes or no, true or false)")
    else:
        assert hosts.cluster_setting() is on


@pytest.mark.parametrize("variables, field, says", [
    ({"JAX_NUM_PROCESSES": "2"}, "JAX_COORDINATOR_ADDRESS", "must be set with JAX_NUM_PROCESSES"),
    ({"JAX_PROCESS_ID": "1"}, "JAX_COORDINATOR_ADDRESS", "must be set with JAX_PROCESS_ID"),
    ({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "2"}, "SLURM_PROCID",
     "must be set with SLURM_JOB_ID and SLURM_NTASKS=2 (a job of 2 processes; srun sets it for each): start every "
     "process with srun, or run alone with --no-cluster (PUREJAXPPO_CLUSTER=off)"),
    ({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "2", "SLURM_PROCID": "1", "SLURM_LOCALID": "1"}, "SLURM_STEP_NODELIST",
     "must be set with SLURM_JOB_ID and SLURM_NTASKS=2"),
    ({"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "1"}, "OMPI_COMM_WORLD_RANK",
     "must be set with OMPI_COMM_WORLD_SIZE=2 (a job of 2 processes; mpirun sets it for each)"),
])
def test_half_set_variables_are_refused_never_a_process_alone(no_join, monkeypatch, variables, field, says):
    """A process count, index or address without the others (no cluster detected to tell them),
    or a scheduler's job of several processes without this one's index: one line naming what is
    missing, not a process that runs alone (and writes) while the others wait for it."""
    from purejaxppo.errors import ConfigError
    from purejaxppo.experiments import hosts

    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as refused:
        hosts.init_distributed()
    assert refused.value.field == field and says in str(refused.value), str(refused.value)
    assert no_join == []


def test_an_ipv6_coordinator_address_must_be_in_brackets():
    from purejaxppo.errors import ConfigError
    from purejaxppo.experiments import hosts

    for address in ("::1:1234", "fe80::1:8476"):  # which colon ends the address?
        with pytest.raises(ConfigError) as refused:
            hosts.check_address(address)
        assert str(refused.value) == (f"JAX_COORDINATOR_ADDRESS={address!r}: an IPv6 address must be in brackets: "
                                      "[address]:port, e.g. [fe80::1]:12345")
    for address in ("[::1]:1234", "[fe80::1]:8476", "localhost:1234", "10.0.0.1:12345"):
        assert hosts.check_address(address) == address


def _waiting(port: int, proc, timeout: float = 120) -> None:
    """Until process 0's coordination service listens on `port` (the process waits for the others)."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"never waited for the others: {proc.poll()}")


@pytest.mark.timeout(200)
@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stop_signal_while_waiting_for_the_other_processes_stops_at_once_with_one_line(tmp_path, signum, code):
    """Process 0 of 2, the other never started: JAX waits (in C++, up to 300 s) for it. Ctrl-C
    or SIGTERM stops the wait within a second, with one line and 128 + the signal."""
    import time

    port = _free_port(28000)
    proc = subprocess.Popen([sys.executable, "-m", "purejaxppo.experiments.cli", *TINY, "--out", str(tmp_path / "run")],
                            env=explicit(2, port)[0], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _waiting(port, proc)
        time.sleep(0.5)
        sent = time.monotonic()
        proc.send_signal(signum)
        output = proc.communicate(timeout=10)[0]
        seconds = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code and seconds < 2, (proc.returncode, seconds, output)
    assert output.splitlines() == [f"purejaxppo: stopped by {signal.Signals(signum).name}: while waiting for the "
                                   f"other processes to join (127.0.0.1:{port}): nothing was written"], output
    assert not (tmp_path / "run").exists()


@pytest.mark.timeout(200)
def test_a_coordinator_port_in_use_is_one_line_saying_how_to_choose_another_and_no_runtime_log(tmp_path):
    """Process 0's coordinator port held by another program: JAX's service would fail with a C++
    log line and crash (SIGSEGV); instead one line naming the address, and what to change."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        env = _env(JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES="2", JAX_PROCESS_ID="0")
        [(code, output)] = start([[*TINY, "--out", str(tmp_path / "run")]], [env], timeout=150)
    assert code == 2, output
    assert output.splitlines() == [
        f"purejaxppo: error: JAX_COORDINATOR_ADDRESS='127.0.0.1:{port}': port {port} is in use on this host (process "
        "0's): another program or another run holds it; give every process an address with another free port"], output
    assert runtime_traces(output) == [], output
    assert not (tmp_path / "run").exists()


def test_a_clusters_coordinator_port_in_use_says_to_set_jax_coordinator_port(no_join, monkeypatch):
    """Process 0 of a SLURM job step whose port (from the job id, or JAX_COORDINATOR_PORT) is held,
    e.g. by another step of the same job: refused before JAX's service tries it."""
    from purejaxppo.errors import ConfigError
    from purejaxppo.experiments import hosts

    slurm = {"SLURM_JOB_ID": "7", "SLURM_STEP_NODELIST": "localhost", "SLURM_NTASKS": "2", "SLURM_PROCID": "0",
             "SLURM_LOCALID": "0"}
    for name, value in slurm.items():
        monkeypatch.setenv(name, value)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        monkeypatch.setenv("JAX_COORDINATOR_PORT", str(port))
        with pytest.raises(ConfigError) as refused:
            hosts.init_distributed()
    assert str(refused.value) == (
        f"JAX_COORDINATOR_PORT='{port}': the slurm coordinator's port {port} is in use on this host (process 0's): "
        "another program or another run holds it; set JAX_COORDINATOR_PORT to another free port, the same for "
        "every process")
    assert no_join == []


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_faked_slurm_job_joins_without_jax_variables(tmp_path):
    """srun's variables alone: JAX's detection finds the job; process 0 says so, and writes."""
    port = _free_port(65535 - 2**12 + 1)  # SLURM's coordinator port: SLURM_JOB_ID % 4096 + 61440
    job = str(port - (65535 - 2**12 + 1) + 4096 * 3)
    envs = [_env(SLURM_JOB_ID=job, SLURM_STEP_NODELIST="localhost", SLURM_NTASKS="2", SLURM_PROCID=str(i),
                 SLURM_LOCALID=str(i)) for i in range(2)]
    out = ["--out", str(tmp_path / "run")]
    results = start([TINY + out] * 2, envs)
    assert [code for code, _ in results] == [0, 0], results
    for i, (_, output) in enumerate(results):
        assert f"purejaxppo: process {i} of 2 joined (via slurm); 2 device(s) in all, 1 here; " \
               "process 0 writes the folder" in output.splitlines()[0], output
    assert (tmp_path / "run" / "summary.json").exists() or (tmp_path / "run" / "summary.csv").exists()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_processes_started_with_different_commands_stop_before_compiling(tmp_path):
    out = ["--out", str(tmp_path / "run")]
    results = start([TINY + out, TINY + ["--set", "lr=1e-3"] + out], explicit(2, _free_port(20000)))
    for code, output in results:
        assert code == 2, results
        assert errors(output) == ["purejaxppo: error: the command: process(es) 1 differ from process 0 (compared by "
                                  "a hash before compiling): start every process with the same command, config "
                                  "files and versions"], output
        assert "compil" not in output.split("error:")[0].lower() and "Traceback" not in output
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_config_file_that_differs_between_hosts_is_refused(tmp_path):
    """The same command, but each host's copy of the config file differs: refused alike."""
    out = ["--out", str(tmp_path / "run")]
    config = "configs/cartpole.yaml"
    text = open(config).read()
    copies = []
    for i, lr in enumerate(["3e-4", "1e-3"]):
        folder = tmp_path / f"host{i}"
        folder.mkdir()
        (folder / "cartpole.yaml").write_text(text.replace("lr: 2.5e-4", f"lr: {lr}"))
        copies.append(folder)
    args = ["train", "cartpole.yaml", *TINY[2:], *out]
    procs = [subprocess.Popen([sys.executable, "-m", "purejaxppo.experiments.cli", *args], env=env, cwd=folder,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for env, folder in zip(explicit(2, _free_port(21000)), copies)]
    outputs = [p.communicate(timeout=250)[0] for p in procs]
    assert [p.returncode for p in procs] == [2, 2], outputs
    assert all("process(es) 1 differ from process 0" in output for output in outputs), outputs
    assert not (tmp_path / "run").exists()


LONG = ["train", "cartpole", "--seeds", "4", "--set", "total_timesteps=25600", "--set", "num_envs=4",
        "--set", "num_steps=16", "--checkpoint-every", "20", "--eval-episodes", "2", "--no-cache"]


def _complete_checkpoints(folder):
    checkpoints = folder / "checkpoints"
    return sorted(int(p.name) for p in checkpoints.iterdir() if p.name.isdigit()) if checkpoints.is_dir() else []


def start_and_signal(args, envs, folder, signum, to, timeout=300, at=None):
    """Start the processes; once the first checkpoint (or that of update `at`) is complete, send
    `signum` to process `to` -> [(exit code, output)], the seconds from the signal to the last exit."""
    import signal as signals
    import time

    procs = [subprocess.Popen([sys.executable, "-m", "purejaxppo.experiments.cli", *args], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for env in envs]
    try:
        deadline = time.monotonic() + timeout
        def ready():
            return at in _complete_checkpoints(folder) if at is not None else _complete_checkpoints(folder)

        while not ready() and time.monotonic() < deadline and procs[0].poll() is None:
            time.sleep(0.1)
        assert ready(), "no checkpoint before the deadline"
        sent = time.monotonic()
        procs[to].send_signal(signum if signum != "KILL" else signals.SIGKILL)
        outputs = [p.communicate(timeout=timeout)[0] for p in procs]
        return [(p.returncode, out) for p, out in zip(procs, outputs)], time.monotonic() - sent
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize("signum, code, to", [("SIGTERM", 143, 1), ("SIGINT", 130, 0)])
def test_a_stop_signal_to_one_process_stops_all_at_the_next_chunk_with_one_checkpoint(tmp_path, signum, code, to):
    import signal as signals

    folder = tmp_path / "run"
    results, seconds = start_and_signal(LONG + ["--out", str(folder)], explicit(2, _free_port(22000 + 50 * to)),
                                        folder, getattr(signals, signum), to)
    assert [c for c, _ in results] == [code, code], results
    newest = _complete_checkpoints(folder)[-1]
    assert newest < 400, "stopped only at the end"
    writer, other = results[0][1], results[1][1]
    assert [line for line in writer.splitlines() if line.startswith("purejaxppo: stopped")] == [
        f"purejaxppo: stopped by {signum} (sent to process {to}): the newest complete checkpoint is at update "
        f"{newest}; resume with: purejaxppo train --resume {folder}"], writer
    assert f"purejaxppo: stopped by {signum} (sent to process {to}): process 1: process 0 keeps the checkpoints" \
        in other, other
    assert "Traceback" not in writer + other
    assert not (folder / "metrics.csv").exists()  # the run did not finish


@pytest.mark.slow
@pytest.mark.timeout(500)
@pytest.mark.parametrize("count, to", [(2, 1), (3, 2)])
def test_a_killed_process_leaves_the_others_to_exit_at_once_with_one_line_naming_it(tmp_path, count, to):
    """SIGKILL of one process but process 0 (as OOM or a node failure): the others see their
    collective fail, say which process was lost (of three, by a roll call among the
    survivors) and how to resume, and exit 1 well within the heartbeat timeout; no traceback
    reaches the terminal (it goes to lost-process.log)."""
    folder = tmp_path / "run"
    envs = [{**env, "PUREJAXPPO_HEARTBEAT_SECONDS": "20"} for env in explicit(count, _free_port(23000 + 10 * count))]
    results, seconds = start_and_signal(LONG + ["--out", str(folder)], envs, folder, "KILL", to)
    assert [code for code, _ in results] == [1 if i != to else -9 for i in range(count)], results
    assert seconds < 20, seconds  # the failed collective, not the heartbeat timeout
    newest = _complete_checkpoints(folder)[-1]
    resume = f"resume with: purejaxppo train --resume {folder}"
    for i, (_, output) in enumerate(results):
        if i == to:
            continue
        lines = [line for line in output.splitlines() if line.startswith("purejaxppo: error")]
        assert len(lines) == 1 and lines[0].startswith(f"purejaxppo: error: process {to} was lost ("), output
        assert lines[0].endswith(f"): the newest complete checkpoint, untouched, is at update {newest}; {resume} "
                                 f"(details: {folder / 'lost-process.log'})" if i == 0 else
                                 f"): process {i}: the checkpoints are process 0's, in {folder}; {resume}"), output
        assert "Traceback" not in output and "@     0x" not in output, output
    assert "Traceback" in (folder / "lost-process.log").read_text()


def test_the_runtime_output_goes_to_the_log_and_python_lines_stay_on_the_terminal(tmp_path):
    code = ("import os, sys; from purejaxppo.experiments.faults import runtime_output_to; "
            f"assert runtime_output_to({str(tmp_path / 'process-1.log')!r}); "
            "os.write(2, b'F1203 12:00:00.000000 client.h:86] Terminating\\n'); "
            "print('purejaxppo: error: the line', file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "purejaxppo: error: the line\n"
    assert (tmp_path / "process-1.log").read_text() == "F1203 12:00:00.000000 client.h:86] Terminating\n"
    assert runtime_traces("F1203 12:00:00.000000 client.h:86] Terminating") != []


@pytest.mark.parametrize("service, ends, says", [
    ("gone", "abort", "purejaxppo: error: process 0 was lost (the end)\n"),
    ("listening", "abort", "purejaxppo: error: another process was lost (the end)\n"),
    ("gone", "exit", ""),
])
def test_a_process_that_jax_aborts_still_prints_its_line_naming_process_0_when_its_service_is_gone(
        tmp_path, service, ends, says):
    """JAX's client aborts a process (SIGABRT) once process 0's service is gone, racing the
    process's own line: the watcher prints the line after the abort; after a normal end, nothing."""
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        port = listening.getsockname()[1]
        if service == "listening":
            listening.listen()
        else:
            listening.close()
        code = ("import os, sys; "
                "from purejaxppo.experiments.faults import line_on_abort, runtime_output_to; "
                f"runtime_output_to({str(tmp_path / 'process-1.log')!r}); "
                f"assert line_on_abort('purejaxppo: error: {{who}} was lost (the end)', '127.0.0.1:{port}'); "
                + ("os.abort()" if ends == "abort" else "sys.exit(0)"))
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == (-signal.SIGABRT if ends == "abort" else 0), done.stderr
    assert done.stderr == says

@pytest.mark.slow
@pytest.mark.timeout(500)
def test_a_stop_signal_during_the_final_evaluation_stops_all_after_it_with_the_checkpoint_of_the_end(tmp_path):
    """SIGTERM to process 1 once the last checkpoint is complete, while the processes evaluate
    (many episodes, so that it lands there): all exit 143 after the evaluation, nothing is
    written but that checkpoint, and the writer's line names it."""
    import signal

    folder = tmp_path / "run"
    args = [*LONG[:LONG.index("--eval-episodes")], "--eval-episodes", "3000", "--no-cache", "--out", str(folder)]
    results, _ = start_and_signal(args, explicit(2, _free_port(22200)), folder, signal.SIGTERM, 1, at=400)
    assert [c for c, _ in results] == [143, 143], results
    assert _complete_checkpoints(folder)[-1] == 400
    assert [line for line in results[0][1].splitlines() if line.startswith("purejaxppo: stopped")] == [
        "purejaxppo: stopped by SIGTERM (sent to process 1): the newest complete checkpoint is at update 400; "
        f"resume with: purejaxppo train --resume {folder}"], results[0][1]
    assert not (folder / "metrics.csv").exists()  # the results were not written


def runtime_traces(output) -> list[str]:
    """The lines of `output` that are a Python traceback, or C++ logs and stack traces (glog's
    "F1203 12:00:00.000000 ..." lines, absl's "*** Check failure stack trace: ***" and its frames)."""
    import re

    trace = re.compile(r"Traceback|Check fail|stack trace|^\*\*\* |^\s+@\s+0x|^[FEWI]\d{4} \d\d:\d\d")
    return [line for line in output.splitlines() if trace.search(line)]


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_when_process_0_is_killed_the_others_exit_within_the_heartbeat_timeout_with_no_trace(tmp_path):
    """Process 0 holds JAX's coordination service: when it goes, the others exit within the
    heartbeat timeout, nonzero, with one line naming it. Which comes first on them is a race:
    the failed collective, and purejaxppo's line, or JAX's own fatal error (SIGABRT; then the
    watcher prints the line); its C++ logs and stack trace go to the folder's process-1.log,
    never to the terminal."""
    folder = tmp_path / "run"
    envs = [{**env, "PUREJAXPPO_HEARTBEAT_SECONDS": "20"} for env in explicit(2, _free_port(23100))]
    results, seconds = start_and_signal(LONG + ["--out", str(folder)], envs, folder, "KILL", 0)
    code, output = results[1]
    assert results[0][0] == -9 and code not in (0, None), results
    assert seconds < 20 + 15, seconds
    assert runtime_traces(output) == [], output
    lines = [line for line in output.splitlines() if line.startswith("purejaxppo: error:")]
    assert len(lines) == 1 and lines[0].startswith("purejaxppo: error: process 0 was lost ("), output
    assert f"process 1: the checkpoints are process 0's, in {folder}" in lines[0], output
    assert (folder / "process-1.log").exists()
    assert _complete_checkpoints(folder)  # the newest complete checkpoint is still there


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_2_process_resume_after_sigterm_is_bit_identical_and_1_process_resumes_it(tmp_path):
    """One process resumes a 2-process run: with 2 devices it runs the same per-device program,
    so bit for bit; with 1 device another program, whose rounding can flip a sampled action
    some hundred updates on and part the runs (measured: run 1 at update 220 of 400), so only
    its first chunk is compared: each run near its own state, far from every other run's."""
    import shutil
    import signal as signals

    import chex
    import numpy as np
    import purejaxppo as ppo

    whole, cut = tmp_path / "whole", tmp_path / "cut"
    results = start([LONG + ["--out", str(whole)]] * 2, explicit(2, _free_port(24000)), timeout=400)
    assert [c for c, _ in results] == [0, 0], results
    results, _ = start_and_signal(LONG + ["--out", str(cut)], explicit(2, _free_port(24100)), cut, signals.SIGTERM, 1)
    assert [c for c, _ in results] == [143, 143], results
    stopped_at = _complete_checkpoints(cut)[-1]
    assert stopped_at < 400
    two_devices, one_device = tmp_path / "two_devices", tmp_path / "one_device"
    shutil.copytree(cut, two_devices)
    shutil.copytree(cut, one_device)

    resume = ["train", "--resume", str(cut)]
    results = start([resume] * 2, explicit(2, _free_port(24200)), timeout=400)
    assert [c for c, _ in results] == [0, 0], results
    assert f"resuming {cut}" in results[0][1].replace("\n", "")
    [(code, output)] = start([["train", "--resume", str(two_devices)]],
                             [_env(XLA_FLAGS="--xla_force_host_platform_device_count=2")], timeout=400)
    assert code == 0, output
    for folder in (cut, two_devices):  # 2 processes, or 1 with 2 devices: the same per-device program
        assert (folder / "metrics.csv").read_text() == (whole / "metrics.csv").read_text()  # bit for bit
        for run in range(4):
            chex.assert_trees_all_equal(ppo.load(folder, run=run)[1], ppo.load(whole, run=run)[1])

    [(code, output)] = start([["train", "--resume", str(one_device)]], [_env()], timeout=400)
    assert code == 0, output
    assert _complete_checkpoints(one_device)[-1] == 400
    step = stopped_at + 20  # the first chunk after the resume: rounding measured <= 3e-7, a flipped action 5e-5
    theirs = [jax_leaves(ppo.load(whole, step=step, run=run)[1].params) for run in range(4)]
    for run in range(4):
        ours = jax_leaves(ppo.load(one_device, step=step, run=run)[1].params)
        distances = [max(float(np.max(np.abs(a - b))) for a, b in zip(ours, other)) for other in theirs]
        assert distances[run] < 1e-3 and min(d for i, d in enumerate(distances) if i != run) > 1e-2, (run, distances)


def jax_leaves(tree):
    import jax
    import numpy as np

    return [np.asarray(x) for x in jax.tree.leaves(tree)]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_four_processes_equal_one_within_float_rounding(tmp_path):
    args = ["train", "cartpole", "--seeds", "4", "--set", "total_timesteps=1024", "--set", "num_envs=4",
            "--set", "num_steps=16", "--eval-episodes", "0", "--no-cache"]
    results = start([args + ["--out", str(tmp_path / "four")]] * 4, explicit(4, _free_port(25000)), timeout=500)
    assert [c for c, _ in results] == [0] * 4, results
    [(code, output)] = start([args + ["--out", str(tmp_path / "one")]], [_env()], timeout=300)
    assert code == 0, output
    assert_metrics_csv_within_rounding(tmp_path / "four", tmp_path / "one", rows=4 * 16, rtol=1e-4)


HELD = r"""
import json, sys
from purejaxppo.experiments.hosts import join
cluster = join()  # the job's processes, handed to what saves and runs
import jax, numpy as np
import purejaxppo as ppo
from purejaxppo.experiments import sweep as sw
from purejaxppo.experiments.checkpoint import Checkpoints

seen = {}
def spy(*args, **kwargs):  # what execute hands back to this process, before run_plan reads it
    results, timings = execute(*args, **kwargs)
    for name, out in results.items():
        seen["rows"] = [sum(s.data.shape[0] for s in x.addressable_shards) if isinstance(x, jax.Array)
                        else x.shape[0] for x in jax.tree.leaves(out.state)]
        seen["metrics"] = None if out.metrics is None else int(out.metrics["total_loss"].shape[0])
    return results, timings
execute, sw.execute = sw.execute, spy
base = ppo.load_config("configs/cartpole.yaml", {"total_timesteps": 640, "num_envs": 4, "num_steps": 16})
checkpoints = Checkpoints(sys.argv[1], cluster=cluster)
result = sw.run_plan(sw.plan(base, sw.make_spec(seeds=4)), checkpoints=checkpoints, checkpoint_every=5,
                     cluster=cluster)
print("HELD", json.dumps({**seen, "state": result.outputs["group0-epochs4"].state is None,
                          "diverged": result.diverged.tolist(), "steps": checkpoints.steps()}))
"""


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_process_that_does_not_write_holds_only_its_own_runs_states_and_no_metrics(tmp_path):
    """Issue 29, item 5: of 4 runs over 2 processes, each process holds its 2 runs' learner
    states (never gathered), only the writer receives the metrics; the checkpoints, each
    process saving its shards, read back into one process whole."""
    import json

    import numpy as np

    from purejaxppo.experiments.checkpoint import Checkpoints

    folder = tmp_path / "checkpoints"
    folder.mkdir()
    procs = [subprocess.Popen([sys.executable, "-c", HELD, str(folder)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for env in explicit(2, _free_port(26000))]
    try:
        outputs = [p.communicate(timeout=350)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [0, 0], outputs
    seen = [json.loads(next(line for line in out.splitlines() if line.startswith("HELD "))[5:]) for out in outputs]
    for held in seen:
        assert set(held["rows"]) == {2}, held  # 2 of the 4 runs' states, on either process
        assert held["state"] and held["steps"] == [5, 10], held
    assert seen[0]["metrics"] == 4 and seen[1]["metrics"] is None, seen
    assert seen[0]["diverged"] == [False] * 4
    import purejaxppo as ppo
    shapes = jax_shapes(ppo.load_config("configs/cartpole.yaml",
                                        {"total_timesteps": 640, "num_envs": 4, "num_steps": 16}))
    states, metrics, meta = Checkpoints(folder, create=False).restore(None, {"group0-epochs4": shapes})
    assert meta["updates_done"] == {"group0-epochs4": 10}
    assert {x.shape[0] for x in jax_leaves(states)} == {4}
    assert metrics["group0-epochs4"]["total_loss"].shape[:2] == (4, 10)
    assert np.all(np.asarray(states["group0-epochs4"].updates_done) == 10)


def jax_shapes(config):
    """A run set's learner state shapes, 4 runs."""
    import jax
    import numpy as np

    from purejaxppo.train import Learner

    learner = Learner(config)
    return jax.eval_shape(jax.vmap(learner.init), jax.ShapeDtypeStruct((4, 2), np.uint32))


@pytest.mark.slow
@pytest.mark.timeout(500)
def test_2_processes_resume_a_1_process_checkpoint_into_their_padded_layout_within_rounding(tmp_path):
    """3 runs over 2 devices are padded to 4: a checkpoint of one process (3 rows) is read into
    that layout (the padding row zeros), and the run ends as the one process's within rounding."""
    import shutil

    args = ["train", "cartpole", "--seeds", "3", "--set", "total_timesteps=2560", "--set", "num_envs=4",
            "--set", "num_steps=16", "--checkpoint-every", "20", "--eval-episodes", "2", "--no-cache"]
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    [(code, output)] = start([args + ["--out", str(whole)]], [_env()])
    assert code == 0, output
    shutil.copytree(whole, cut)
    shutil.rmtree(cut / "checkpoints" / "40")  # as if stopped after update 20
    for name in ("metrics.csv", "summary.json", "summary.md", "learning_curve.png"):
        (cut / name).unlink(missing_ok=True)
    results = start([["train", "--resume", str(cut)]] * 2, explicit(2, _free_port(27000)))
    assert [c for c, _ in results] == [0, 0], results
    assert _complete_checkpoints(cut) == [20, 40]
    assert sorted(p.name for p in (cut / "checkpoints" / "40" / "state").glob("ocdbt.process_*")) == [
        "ocdbt.process_0", "ocdbt.process_1"]  # each process saved its shards
    assert_metrics_csv_within_rounding(cut, whole, rows=3 * 40, rtol=1e-4)
