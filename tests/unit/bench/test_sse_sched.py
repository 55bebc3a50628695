"""sse_sched: the proxy's runs read from `perf sched timehist`'s text, and what is made of them."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "loadtest" / "overhead"))
import sse_sched  # noqa: E402

# perf 6.1's timehist: a thread of a multi-threaded process is named comm[tid/pid], a process's main thread
# comm[pid]; times in milliseconds (wait, scheduling delay, run time). A task whose name holds brackets and
# spaces, and the idle task, must not be mistaken for the proxy's threads.
TIMEHIST = """           time    cpu  task name                       wait time  sch delay   run time
                        [tid/pid]                          (msec)     (msec)     (msec)
--------------- ------  ------------------------------  ---------  ---------  ---------
   47114.208870 [0000]  python3[400]                                                   awakened: nginx[200]
   47114.208879 [0000]  nginx[200]                          0.500      0.012      0.044
   47114.208890 [0000]  python3[400]                                                   awakened: prefixgate[301/300]
   47114.208900 [0001]  prefixgate[301/300]                 0.900      0.040      0.050
   47114.209078 [0000]  <idle>                              0.000      0.000      0.178
   47114.209100 [0001]  python3[400]                                                   awakened: prefixgate[301/300]
   47114.209109 [0001]  prefixgate[301/300]                 0.400      0.030      0.030
   47114.209200 [0001]  prefixgate[302/300]                 9.000      0.020      0.060
   47114.209300 [0000]  python3 [x][400/400]                0.100      0.001      0.100
   47114.209400 [0000]  nginx[200]                          0.300      0.014      0.046
"""


def test_runs_are_read_per_thread_of_the_given_processes():
    """Ensures each run lands under its thread, in microseconds, whether named [tid/pid] or [pid], placed on the
    waker's CPU or another by the wake-up before it (none when no wake-up was seen), and that other processes'
    threads (and the idle task) are left out."""
    assert sse_sched.runs_of(TIMEHIST, {300}) == {301: [(40.0, 50.0, "other"), (30.0, 30.0, "waker")],
                                                  302: [(20.0, 60.0, None)]}
    assert sse_sched.runs_of(TIMEHIST, {200}) == {200: [(12.0, 44.0, "waker"), (14.0, 46.0, None)]}
    assert sse_sched.runs_of(TIMEHIST, {999}) == {}


def test_summary_puts_the_busiest_thread_first_with_its_per_event_figures():
    """Ensures the summary orders threads by wake-ups and divides the wake-ups and the run time by the events."""
    threads = sse_sched.summarize(sse_sched.runs_of(TIMEHIST, {300}), events=4)
    assert [t["tid"] for t in threads] == [301, 302]
    assert threads[0]["wakeups_per_event"] == 0.5
    assert threads[0]["run_us_per_event"] == 20.0
    assert threads[0]["sch_delay_us"]["p50"] == 40.0 and threads[0]["sch_delay_us"]["p99"] == 40.0
    assert threads[1]["run_us"]["p50"] == 60.0
    assert threads[0]["on_waker_cpu_share"] == 0.5 and threads[0]["sch_delay_on_waker_cpu_p50_us"] == 30.0
