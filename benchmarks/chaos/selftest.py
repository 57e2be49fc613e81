#!/usr/bin/env python3
"""selftest.py DPL JSON - check the chaos driver: its stderr parser and
the names it attributes in /dev/shm on fixed text, then one SIGKILL and
one SIGSTOP trial over shm, whose JSON must hold both trials with every
check, the launcher's last line naming the faulty rank and no process of
the job left. Exit 0 when all holds, else 1 with the reason."""

import json
import os
import subprocess
import sys

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chaos  # noqa: E402


def fail(why):
    print("selftest: " + why, file=sys.stderr)
    sys.exit(1)


def check_parser():
    text = "\n".join([
        "dpl train: rank 1 (stage rank 1, replica 0): timed out after "
        "2000 ms in 1B6 waiting for rank 2",
        "dpl train: rank 3: setup: bootstrap: rank 2 never arrived",
        "dpl train: rank 1 (pid 11) failed (exit status 1)",
        "dpl train: rank 2 (pid 12) stopped responding (stopped by signal "
        "19 (Stopped (signal)) and never continued; killed); ranks 1, 3 "
        "gave up waiting for it; 3 of 4 ranks exited with an error", ""])
    launcher, ranks, last = chaos.parse_stderr(text)
    if sorted(launcher) != [1, 2] or sorted(ranks) != [1, 3]:
        fail("parse_stderr: launcher %s, ranks %s" % (launcher, ranks))
    if not last.startswith("dpl train: rank 2 (pid 12) stopped"):
        fail("parse_stderr: last line %r" % last)
    want = {"dpl-shm-3-p4242": 4242, "4243:0:0": 4243,
            "sysv:77:4244": 4244, "ucx_shm_posix_1a2b": None}
    for name, pid in want.items():
        if chaos.owner_pid(name) != pid:
            fail("owner_pid(%r) = %r, not %r" % (name, chaos.owner_pid(name),
                                                 pid))


def check_run(dpl, out):
    rc = subprocess.call([sys.executable, chaos.__file__, "--dpl", dpl,
                          "--transports", "shm", "--faults", "kill,stop",
                          "--trials", "1", "--timeout", "2", "--seed", "7",
                          "--steady-s", "1", "--json", out])
    if rc != 0:
        fail("chaos.py exited %d" % rc)
    with open(out) as f:
        doc = json.load(f)
    trials = doc["trials"]
    if [t["fault"] for t in trials] != ["kill", "stop"]:
        fail("trials %s" % [t["fault"] for t in trials])
    for t in trials:
        if t["missed"]:
            fail("%s trial missed: %s" % (t["fault"], t["why"]))
        if set(t["checks"]) != {"in_time", "named", "procs", "shm"}:
            fail("checks %s" % sorted(t["checks"]))
        if not t["launcher_names_victim"]:
            fail("%s of rank %d: the launcher's last line is %r" % (
                t["fault"], t["victim"], t["last_line"]))
        if not t["checks"]["procs"]:
            fail("%s: processes left: %s" % (t["fault"], t["procs_left"]))
    rows = {r["fault"]: r for r in doc["summary"]}
    if rows["kill"]["trials"] != 1 or rows["stop"]["trials"] != 1:
        fail("summary %s" % doc["summary"])


def main(argv):
    if len(argv) != 2:
        print("usage: selftest.py DPL JSON", file=sys.stderr)
        return 2
    check_parser()
    check_run(argv[0], argv[1])
    print("selftest: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
