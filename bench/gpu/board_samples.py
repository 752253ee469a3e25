"""The board's SM clock and power sampled by nvidia-smi while a benchmark runs.

Under sustained load a Hopper board reaches its power cap and lowers its SM clock, by a different
amount for different kernels; two kernels' times on the same shape then differ by cycles and by
clock. BoardSamples runs `nvidia-smi --query-gpu=... -lms PERIOD` as a child process and answers,
for a stretch of wall time, the median SM clock and power of the samples taken in it, so that a
driver can record them beside each timed call.
"""

import datetime
import os
import statistics
import subprocess
import tempfile

QUERY = "timestamp,clocks.sm,power.draw"


def parse_sample(line):
    """One nvidia-smi CSV line (noheader, nounits) -> (epoch seconds, SM MHz, watts), or None.

    nvidia-smi writes the timestamp in this machine's local time ("2026/12/06 09:13:05.123")."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != 3:
        return None
    try:
        t = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        return t, float(parts[1]), float(parts[2])
    except ValueError:  # "[N/A]" fields, a partly written last line
        return None


def summarise(samples, t0, t1):
    """The median SM clock and power of the samples in [t0, t1], or None without any."""
    inside = [s for s in samples if t0 <= s[0] <= t1]
    if not inside:
        return None
    return {
        "sm_mhz": statistics.median(s[1] for s in inside),
        "power_w": statistics.median(s[2] for s in inside),
        "samples": len(inside),
    }


class BoardSamples:
    """nvidia-smi sampling the first GPU every period_ms into a temporary file, as a context
    manager. window(t0, t1) reads what it has written since the last call. With period_ms <= 0,
    or where nvidia-smi cannot start, every window is None."""

    def __init__(self, period_ms):
        self.period_ms = period_ms
        self.proc = None
        self.file = None
        self.reader = None
        self.samples = []
        self.partial = ""  # a last line nvidia-smi has not finished writing

    def __enter__(self):
        if self.period_ms <= 0:
            return self
        self.file = tempfile.NamedTemporaryFile("w+", suffix=".csv", delete=False)
        try:
            self.proc = subprocess.Popen(
                [
                    "nvidia-smi",
                    "--id=0",
                    f"--query-gpu={QUERY}",
                    "--format=csv,noheader,nounits",
                    f"--loop-ms={self.period_ms}",
                ],
                stdout=self.file,
                stderr=subprocess.DEVNULL,
            )
        except OSError:
            self.proc = None
        self.reader = open(self.file.name)
        return self

    def window(self, t0, t1):
        if self.proc is None:
            return None
        lines = (self.partial + self.reader.read()).split("\n")
        self.partial = lines.pop()
        self.samples += [s for s in map(parse_sample, lines) if s is not None]
        # Windows come in time order: samples before this one's start are not asked for again.
        self.samples = [s for s in self.samples if s[0] >= t0]
        return summarise(self.samples, t0, t1)

    def __exit__(self, *exc):
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait()
        if self.file is not None:
            self.reader.close()
            self.file.close()
            os.unlink(self.file.name)
