"""provenance: git state, build type, load sampling and the report paragraph, on a throwaway repository."""
import subprocess

import provenance


def git(repo, *args):
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                   capture_output=True)


def test_git_info_reports_the_commit_and_the_dirty_files(tmp_path):
    """Ensures the commit id, and a dirty flag listing changed and untracked files (none when clean); no commit
    outside a repository."""
    outside = tmp_path / "outside"
    outside.mkdir()
    assert provenance.git_info(outside) == {"commit": None, "commit_date": None, "dirty": False, "dirty_files": []}
    tmp_path = tmp_path / "repo"
    tmp_path.mkdir()
    git(tmp_path, "init", "-q")
    (tmp_path / "a.txt").write_text("1\n")
    git(tmp_path, "add", "a.txt")
    git(tmp_path, "commit", "-q", "-m", "one")
    head = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    clean = provenance.git_info(tmp_path)
    assert clean["commit"] == head and len(head) == 40 and not clean["dirty"] and clean["dirty_files"] == []
    (tmp_path / "a.txt").write_text("2\n")
    (tmp_path / "new.txt").write_text("x\n")
    dirty = provenance.git_info(tmp_path)
    assert dirty["dirty"] and sorted(dirty["dirty_files"]) == ["a.txt", "new.txt"]


def test_build_type_comes_from_the_cmake_cache_above_the_binary(tmp_path, monkeypatch):
    """Ensures the build folder is found above a binary (or taken from PREFIXGATE_BUILD_DIR) and its
    CMAKE_BUILD_TYPE read."""
    build = tmp_path / "build"
    (build / "loadtest").mkdir(parents=True)
    (build / "CMakeCache.txt").write_text("FOO:BOOL=ON\nCMAKE_BUILD_TYPE:STRING=Release\n")
    sim = build / "loadtest" / "sim"
    sim.write_bytes(b"\x7fELF")
    monkeypatch.delenv("PREFIXGATE_BUILD_DIR", raising=False)
    assert provenance.find_build_dir(sim) == build
    info = provenance.build_info({"sim": sim})
    assert info["build_type"] == "Release" and info["build_dir"] == str(build)
    assert len(info["binaries"]["sim"]["sha256"]) == 16
    copy = tmp_path / "snapshot" / "sim"          # a copy outside the build folder, as bench_common.sh makes
    copy.parent.mkdir()
    copy.write_bytes(b"\x7fELF")
    assert provenance.build_info({"sim": copy})["build_type"] is None
    monkeypatch.setenv("PREFIXGATE_BUILD_DIR", str(build))
    assert provenance.build_info({"sim": copy})["build_type"] == "Release"
    assert provenance.cmake_build_type(tmp_path) is None


def test_load_sampler_and_the_report_paragraph(monkeypatch):
    """Ensures the sampler keeps the highest 1-minute load seen and the paragraph states commit, tree, build type,
    command, cores and loads."""
    loads = iter([[0.5, 0.4, 0.3], [3.5, 1, 1], [1.25, 1, 1], [1.0, 0.9, 0.8]])
    monkeypatch.setattr(provenance, "loadavg", lambda: next(loads))
    with provenance.LoadSampler(interval_s=3600) as sampler:
        sampler._sample()
        sampler._sample()
    assert sampler.max_1m == 3.5 and sampler.before == [0.5, 0.4, 0.3] and sampler.after == [1.0, 0.9, 0.8]
    info = provenance.collect("scripts/bench_quality.sh --seeds 1-5", {}, sampler)
    info["git"] = {"commit": "abc123", "commit_date": "2026-12-01", "dirty": True, "dirty_files": ["x.py"]}
    info["build"] = {"build_dir": "/b", "build_type": "Release", "binaries": {}}
    text = "\n".join(provenance.markdown(info))
    for part in ["abc123", "**dirty**", "`x.py`", "`Release`", "scripts/bench_quality.sh --seeds 1-5",
                 f"{provenance.cores()} cores", "before 0.50/0.40/0.30", "after 1.00/0.90/0.80", "during the run 3.50"]:
        assert part in text, part


def test_the_tree_as_the_run_began_wins_over_the_outputs_it_wrote(tmp_path, monkeypatch):
    """Ensures a report states the git state taken when its run began: plots the run wrote into the tree before it
    ended do not make the code that ran look dirty (the first seeded report said dirty for its own ten PNGs)."""
    git(tmp_path, "init", "-q")
    (tmp_path / "a.txt").write_text("1\n")
    git(tmp_path, "add", "a.txt")
    git(tmp_path, "commit", "-q", "-m", "one")
    at_start = provenance.git_info(tmp_path)
    (tmp_path / "plot.png").write_bytes(b"\x89PNG")
    after = provenance.git_info(tmp_path)
    assert not at_start["dirty"] and after["dirty_files"] == ["plot.png"]
    monkeypatch.setattr(provenance, "git_info", lambda: after)  # what collect() would see at the end of the run
    assert provenance.collect("c", {}, git=at_start)["git"] == at_start
    assert provenance.collect("c", {})["git"] == after
