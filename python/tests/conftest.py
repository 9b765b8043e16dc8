# SPDX-License-Identifier: MIT
"""Fixtures of the binding's tests: segments made with the project's CLI
(SHMT_CLI, set by ctest) from a config text, removed afterwards."""
import itertools
import os
import subprocess
import sys
import tempfile

import pytest

import shmthrottle

_seq = itertools.count()


def pytest_report_header(config):
    return ["interpreter: %s (%s)" % (sys.executable, sys.version.split()[0]),
            "shmthrottle: %s from %s" % (shmthrottle.version(),
                                         shmthrottle.__file__)]


def cli():
    path = os.environ.get("SHMT_CLI")
    if not path:
        pytest.fail("SHMT_CLI is not set: run these tests with ctest")
    return path


BASE = """
[segment]
max_slots = 64
arena = 4MiB
[dictionary]
enabled = yes
size = 16MiB
shards = 4
max_value = 1MiB
[analyzer]
enabled = yes
size = 1MiB
window = 1m
subwindows = 12
"""


def create_segment(conf):
    name = "/shmt-pytest-%d-%d" % (os.getpid(), next(_seq))
    with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
        f.write(BASE + conf)
        path = f.name
    try:
        r = subprocess.run([cli(), "-s", name, "create", "-c", path],
                           capture_output=True, text=True, timeout=30)
    finally:
        os.unlink(path)
    assert r.returncode == 0, r.stderr
    return name


def remove_segment(name):
    try:
        os.unlink("/dev/shm" + name)
    except FileNotFoundError:
        pass


@pytest.fixture
def make_segment():
    made = []

    def make(conf=""):
        name = create_segment(conf)
        made.append(name)
        return name
    yield make
    for name in made:
        remove_segment(name)
