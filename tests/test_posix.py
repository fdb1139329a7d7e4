"""pjdfstest (the POSIX conformance suite, crate `pjdfstest`) on a read-write oxzfs mount: every test
must pass (ext4 passes all 398 here); the pool is clean for OpenZFS's zdb afterwards."""
import os
import shutil
import subprocess

import pytest

from test_write import make_devs, zdb_check

CONFIG = """[features]
posix_fallocate = {}
[settings]
naptime = 0.001
allow_remount = false
[dummy_auth]
entries = [ ["nobody", "nogroup"], ["tests", "tests"] ]
"""


def pjdfstest_bin():
    for p in (shutil.which("pjdfstest"), os.path.expanduser("~/.cargo/bin/pjdfstest")):
        if p and os.access(p, os.X_OK):
            return p
    pytest.fail("pjdfstest is not installed: run scripts/install-deps.sh (cargo install pjdfstest)")


def test_pjdfstest_passes_on_a_readwrite_mount(oxzfs):
    binary = pjdfstest_bin()
    pool = "wposix"
    base = os.path.join(oxzfs.base, "posix")
    vdir = os.path.join(base, "vdevs")
    # Sockets are bound by path (at most 107 bytes): keep the mount's path short.
    alt = f"/tmp/oxp{os.getpid()}"
    devs = make_devs(vdir, 1, 1024)
    r = oxzfs.zpool("create", "-R", alt, pool, *devs)
    assert r.returncode == 0, repr(r)
    oxzfs.imported.append(pool)
    work = os.path.join(alt, pool, "pjd")
    os.makedirs(work)
    os.chmod(work, 0o777)
    cfg = os.path.join(base, "pjdfstest.toml")
    with open(cfg, "w") as f:
        f.write(CONFIG)
    r = subprocess.run([binary, "-c", cfg, "-p", work], capture_output=True, text=True, errors="replace",
                       cwd=work, timeout=1800)
    out = r.stdout + r.stderr
    summary = [ln for ln in out.splitlines() if ln.startswith("Summary:")]
    assert summary, f"pjdfstest printed no summary (exit {r.returncode}):\n{out[-3000:]}"
    failed = [ln.split()[0] for ln in out.splitlines() if ln.rstrip().endswith("FAILED")]
    assert r.returncode == 0 and " 0 failed" in summary[0], f"{summary[0]}\nfailed: {failed}"
    assert oxzfs.export(pool).returncode == 0
    shutil.rmtree(alt, ignore_errors=True)
    zdb_check(vdir, pool)
