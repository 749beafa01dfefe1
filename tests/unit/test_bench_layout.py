"""The benchmarks' command line and the files they read, without running one."""

from __future__ import annotations

import subprocess
import sys

from bench import harness


def test_the_benchmarks_find_the_repository_files_they_read() -> None:
    assert harness.SAMPLE_RUNTIME.is_file()
    assert harness.RESULTS.parent.name == "bench" and harness.RESULTS.parent.is_dir()


def test_every_verb_parses_its_options() -> None:
    for verb in ("dispatch", "peer", "soak"):
        shown = subprocess.run([sys.executable, "-m", "bench", verb, "--help"],
                               capture_output=True, text=True, check=True)
        assert f"python -m bench {verb}" in shown.stdout
