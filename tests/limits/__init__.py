"""Tests of the admission limiters."""
