"""The package without torch: the numpy path imports, and so does its star import."""

import subprocess
import sys


def run_without_torch(code):
    """code in a child process where torch cannot be imported."""
    prelude = "import sys\nsys.modules['torch'] = None\n"
    done = subprocess.run(
        [sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


def test_star_import_gives_the_numpy_path():
    run_without_torch(
        "from dcpmla import *\n"
        "assert cpu.mla_decode and reference_attend and slot_mapping\n"
        "assert 'BatchMLADecodeWrapper' not in dir()\n"
    )


def test_torch_names_fail_only_when_used():
    run_without_torch(
        "import dcpmla\n"
        "try:\n"
        "    dcpmla.BatchMLADecodeWrapper\n"
        "except ImportError:\n"
        "    pass\n"
        "else:\n"
        "    raise AssertionError('BatchMLADecodeWrapper imported without torch')\n"
    )
