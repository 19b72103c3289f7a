"""Where a test file marks a line of its own kernels: `# <marker>` at the end of the line an error names."""


def marked_line(path: str, marker: str) -> int:
    """The line of `path` that ends with the comment `# <marker>` (exactly one)."""
    with open(path) as f:
        hits = [i for i, ln in enumerate(f, 1) if ln.rstrip().endswith(f"# {marker}")]
    assert len(hits) == 1, marker
    return hits[0]
