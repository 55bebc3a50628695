"""The quality report's PNG plots (matplotlib, Agg backend): TTFT CDF and requests in flight per pod, one seed."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from bench.stats import pod_inflight_series  # noqa: E402


def plot_ttft_cdf(path, workload, runs, seed):
    """One line per strategy: the fraction of requests with TTFT <= x (log x axis)."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, records in runs:
        values = sorted(r.ttft_s for r in records if r.ok and r.ttft_s >= 0)
        if values:
            ax.step(values, [(i + 1) / len(values) for i in range(len(values))], where="post", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("TTFT (simulated seconds, log scale)")
    ax.set_ylabel("fraction of requests")
    ax.set_title(f"{workload.name}: TTFT CDF per strategy (seed {seed})")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_pod_load(path, workload, runs, seed):
    """One panel per strategy: requests in flight per pod over time, as the client saw them."""
    fig, axes = plt.subplots(len(runs), 1, figsize=(8, 1.9 * len(runs) + 0.6), sharex=True, squeeze=False)
    for ax, (name, records) in zip(axes[:, 0], runs):
        times, series = pod_inflight_series([r for r in records if r.ok])
        for pod, values in series.items():
            ax.plot(times, values, linewidth=0.8, label=pod.rsplit("-", 1)[-1])
        boundary = 0.0
        for _, seconds in workload.stages[:-1]:
            boundary += seconds
            ax.axvline(boundary, color="grey", linewidth=0.6, linestyle=":")
        ax.set_title(name, fontsize=9, loc="left")
        ax.set_ylabel("in flight", fontsize=8)
        ax.grid(True, alpha=0.3)
    axes[-1, 0].set_xlabel("simulated seconds since the start" + (" (dotted: rate steps)" if workload.stages else ""))
    axes[0, 0].legend(title="pod", fontsize=6, title_fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(f"{workload.name}: requests in flight per pod (seed {seed})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
