"""A generated block of docs/benchmarks.md: the lines between two HTML-comment markers, rewritten by the report that
owns them (real_report.py, flow.py) while the text around them is kept."""


def replace_block(text, begin, end, generated):
    """`text` with the lines between `begin` and `end` replaced by `generated` (the markers kept); exits naming the
    markers when either is missing."""
    if begin not in text or end not in text:
        raise SystemExit(f"the markers {begin} and {end} are missing")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return head + begin + "\n" + "\n".join(generated).rstrip("\n") + "\n" + end + tail
