"""Test doubles, not used by any stage: a scripted OpenAI-compatible server and a tiny
random-weight model builder. Tests, benchmarks and offline smoke runs import them from here so
that no pipeline module depends on them."""
