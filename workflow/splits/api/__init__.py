"""The Python API for interactive use (a notebook, a script): open posts, take a pool by topic
and pair, score lexicons.

    import splits.api as sp

    run = sp.open_run("results")               # a finished run (its config beside it)
    pool = run.pool("Soccer", "black", "jewish")
    pool.lift('goal, "penalty kick"', "jewish")  # lift@k rows, as the lift job writes them
    pool.ranked(["goal"], top=10)               # the ranked list, padding marked
    pool.triviality(["Jewish", "synagogue"], "jewish")
    pool.fighting_words()                       # z-scores of the pool's n-grams

``open_release`` reads a local copy of the authors' data, ``open_posts`` any posts table. Every
call returns a polars DataFrame and takes any setting by keyword (``mode="release"``,
``list_size=2000``, ``seed=7``, ``encoder="bert-base-uncased"``; the names are ``KEYWORDS``);
unset settings come from the config, and what it does not set from the schema. The numbers are
the jobs' own: ``lift`` runs the lift job's functions on the same pool index, ``triviality`` the
triviality job's score, ``fighting_words`` the counting baseline's. Documented in docs/api.md.
"""

from splits.api.settings import KEYWORDS
from splits.api.sources import Pool, Source, open_posts, open_release, open_run

__all__ = ["KEYWORDS", "Pool", "Source", "open_posts", "open_release", "open_run"]
