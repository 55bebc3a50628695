"""scheduler_slice_us: the gateway's event-loop threads run with the EEVDF slice asked for (100 us by default), the
other threads with the kernel's, and 0 leaves every thread at the kernel's default."""
import os
from pathlib import Path

import pytest

from harness import Sim, wait_until


def slices(pid):
    """{tid: se.slice in ns} for every thread of `pid` (empty when the kernel shows no se.slice)."""
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        for line in (task / "sched").read_text().splitlines():
            if line.startswith("se.slice"):
                found[int(task.name)] = int(line.split(":")[1])
    return found


def kernel_honours_custom_slices():
    """EEVDF's custom slices came with Linux 6.12; 6.6 to 6.11 show se.slice but ignore the slice asked for."""
    major, minor = (int(x) for x in os.uname().release.split(".")[:2])
    return (major, minor) >= (6, 12) and bool(slices("self"))


@pytest.mark.skipif(not kernel_honours_custom_slices(), reason="this kernel has no EEVDF custom slices (Linux 6.12+)")
def test_event_loops_run_with_the_configured_slice(tmp_path, gateway_factory):
    """Ensures exactly the `threads` event loops carry the slice (100 us by default, 250 us when set), and that 0
    leaves every thread at the kernel's default (so the first checks could fail)."""
    pod = Sim(tmp_path, "engine-0")
    try:
        default = gateway_factory([pod], config={"threads": 2})
        chosen = gateway_factory([pod], config={"threads": 3, "scheduler_slice_us": 250})
        off = gateway_factory([pod], config={"threads": 2, "scheduler_slice_us": 0})
        for gateway, slice_ns, loops in ((default, 100_000, 2), (chosen, 250_000, 3)):
            wait_until(lambda: sum(v == slice_ns for v in slices(gateway.proc.pid).values()) == loops,
                       what=f"{loops} threads with a {slice_ns} ns slice")
            threads = slices(gateway.proc.pid)
            assert sum(v == slice_ns for v in threads.values()) == loops
            assert len(threads) > loops  # the control and drain threads keep the kernel's
        kernel_default = slices("self")[min(slices("self"))]
        assert set(slices(off.proc.pid).values()) == {kernel_default}
    finally:
        pod.stop()
