"""Integer helpers for launch configurations, in plain Python: triton.cdiv and triton.next_power_of_2 are
constexpr functions whose host-side call costs microseconds, paid on every operator call."""


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 << (n - 1).bit_length() if n > 1 else 1
