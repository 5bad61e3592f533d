"""The topics stage family (``workflow/rules/topics.smk``): the BM25 topic splits and LLM topic
generation (``generate``).

Topic splits: the posts of users at or above each demographic's threshold percentile, each post
once and in post-id order, form one shared index (``topics.index: shared``: idf and average length
are the same for every group, so scores compare across groups directly); ``per_demographic``
builds one index per group instead. The top ``topics.top_k`` posts holding one of a topic's
keywords as a phrase are kept per (demographic, topic); a topic's rows are pooled over the
demographics and the bottom ``topics.drop_fraction`` by ``norm_score`` dropped. Topics on which no
pair of demographics has the posts one quadruplet needs are then left out, with a run-health
finding, and each group's share of topic posts from its own seed subreddits is measured.

No index is built over all posts at once: the stage runs as map -> reduce -> map -> reduce
(``splits topic-splits shard | stats | global-stats | score | merge``, one Snakemake job each, per
shard for stats and score), each job holding one shard; ``splits topic-splits run`` and
``in_process`` run the same functions in one process. Modules, in the order of the steps:
``shards`` (map 0), ``corpus`` and ``statistics`` (map 1, reduce 1), ``index`` and ``scoring``
(map 2), ``merge`` and ``findings`` (reduce 2), ``settings`` (one class per rule), ``cli``.
"""
