"""Why a strategy wins or loses a workload: its per-request decisions, read back from one run's records (pure
functions, no I/O).

A group is a workload's unit of reuse (a conversation, a prefix group, a trace chain: Record.group). Taken in send
order over the ok requests, every request of a group after its first either followed the group's previous
request to its pod or moved to another one. Moving is what loses cache hits (the previous pod holds the group's
blocks) and following is what piles load on one pod, so the figures compare the two kinds of request and say how
much lighter the pod a request moved to was when it was sent.

In flight at a pod at time t = the ok requests of the run answered by that pod with send_s <= t < end_s (as the
client saw them: send to last byte; the gateway's own count is close but not the same).
"""
from bisect import bisect_right
from collections import Counter, defaultdict
from statistics import median, pstdev

from bench.stats import percentile

NAN = float("nan")


class PodLoad:
    """Requests in flight per pod at any time, from the ok records' send .. end intervals."""

    def __init__(self, ok):
        sends, ends = defaultdict(list), defaultdict(list)
        for rec in ok:
            sends[rec.pod].append(rec.send_s)
            ends[rec.pod].append(rec.end_s)
        self.sends = {pod: sorted(times) for pod, times in sends.items()}
        self.ends = {pod: sorted(times) for pod, times in ends.items()}

    def at(self, pod, t, exclude=None):
        """In flight at `pod` at time t, without the record `exclude` (the request being sent)."""
        # Every interval ends at or after its start, so those containing t = started by t - ended by t.
        count = bisect_right(self.sends.get(pod, []), t) - bisect_right(self.ends.get(pod, []), t)
        if exclude is not None and exclude.pod == pod and exclude.send_s <= t < exclude.end_s:
            count -= 1
        return count


def group_moves(ok):
    """[(request, the group's previous request)] for every request of `ok` after its group's first, in send order."""
    groups = defaultdict(list)
    for rec in sorted(ok, key=lambda r: (r.send_s, r.rid)):
        groups[rec.group].append(rec)
    return [(rec, prev) for members in groups.values() for prev, rec in zip(members, members[1:])]


def _hit(recs):
    prompt = sum(r.prompt_tokens for r in recs)
    return sum(r.cached_tokens for r in recs) / prompt if prompt else NAN


def _mean(values):
    return sum(values) / len(values) if values else NAN


def decision_stats(records, pods=0):
    """The decision figures of one run (NaN where a figure has nothing to measure); `pods` = pods in the fleet, so
    a pod that served nothing counts in the load spread:
    - follow_rate: share of the requests after a group's first that went to the pod of the group's previous one;
    - hit_followed, hit_moved: engine hit ratio (cached / prompt tokens) of those that followed / moved;
    - ttft_p90_followed, ttft_p90_moved: their TTFT p90;
    - moved_share_of_misses: of the prompt tokens not cached in requests after a group's first, the share in moved
      requests (how much of the miss the moves explain);
    - inflight_gap_moved: median over moved requests of (in flight at the previous pod - in flight at the chosen
      pod) when sent: how much lighter the pod it moved to was (1 = a warm pod left for one request of load);
    - pods_per_group: mean distinct pods used by the groups of two requests or more;
    - pod_load_cv: coefficient of variation (population) of the requests served per pod;
    - match_moved_mean: mean x-prefix-match-percent of moved requests (those without the header ignored)."""
    ok = [r for r in records if r.ok]
    pairs = group_moves(ok)
    followed = [rec for rec, prev in pairs if rec.pod == prev.pod]
    moved = [(rec, prev) for rec, prev in pairs if rec.pod != prev.pod]
    moved_recs = [rec for rec, _ in moved]
    load = PodLoad(ok)
    gaps = [load.at(prev.pod, rec.send_s) - load.at(rec.pod, rec.send_s, exclude=rec) for rec, prev in moved]
    missed = sum(r.prompt_tokens - r.cached_tokens for r, _ in pairs)
    pods_of, sizes = defaultdict(set), Counter(r.group for r in ok)
    for rec in ok:
        pods_of[rec.group].add(rec.pod)
    per_pod = Counter(r.pod for r in ok)
    counts = list(per_pod.values()) + [0] * max(0, pods - len(per_pod))
    mean_load = _mean(counts)
    return {
        "follow_rate": len(followed) / len(pairs) if pairs else NAN,
        "hit_followed": _hit(followed), "hit_moved": _hit(moved_recs),
        "ttft_p90_followed": percentile([r.ttft_s for r in followed if r.ttft_s >= 0], 90),
        "ttft_p90_moved": percentile([r.ttft_s for r in moved_recs if r.ttft_s >= 0], 90),
        "moved_share_of_misses": (sum(r.prompt_tokens - r.cached_tokens for r in moved_recs) / missed
                                  if missed else NAN),
        "inflight_gap_moved": median(gaps) if gaps else NAN,
        "pods_per_group": _mean([len(pods_of[g]) for g, n in sizes.items() if n > 1]),
        "pod_load_cv": pstdev(counts) / mean_load if counts and mean_load else NAN,
        "match_moved_mean": _mean([r.match_percent for r in moved_recs if r.match_percent >= 0]),
    }
