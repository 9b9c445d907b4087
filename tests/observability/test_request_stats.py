"""The request histograms count each latency in the bucket Prometheus defines for it."""

from __future__ import annotations

from bisect import bisect_left

from hypothesis import given
from hypothesis import strategies as st

from llmrelay.observability.request_stats import LATENCY_BUCKETS_S, RequestStats

LATENCIES = st.one_of(
    st.floats(min_value=0.0, max_value=1000.0, allow_nan=False),
    st.sampled_from(LATENCY_BUCKETS_S),  # exactly on a bound: counted in that bound's bucket
)


@given(st.lists(LATENCIES, min_size=1, max_size=50))
def test_each_latency_lands_in_the_first_bucket_whose_bound_holds_it(seconds: list[float]) -> None:
    stats = RequestStats()
    for value in seconds:
        stats.observe("chat.completions", "openai", "m", "p", 200, value)
    expected = [0] * (len(LATENCY_BUCKETS_S) + 1)
    for value in seconds:
        expected[bisect_left(LATENCY_BUCKETS_S, value)] += 1
    histogram = next(f for f in stats.collect() if f.name == "llmrelay_request_duration_seconds")
    buckets = [s for s in histogram.samples if s.name.endswith("_bucket")]
    running = 0
    for sample, count in zip(buckets, expected, strict=True):
        running += count
        assert sample.value == running
    assert sum(s.value for s in histogram.samples if s.name.endswith("_count")) == len(seconds)
