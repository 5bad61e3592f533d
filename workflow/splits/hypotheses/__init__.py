"""Hypothesis validation: lift and triviality of lexical hypotheses (the 2026 Splits! framework).

A hypothesis claims "on topic t, group A uses lexicon L more than group B". Modules:

- ``lexicon``: the hypothesis table (reading user files, cleaning, deduplication, the set schema);
- ``retrieval``: one exact BM25 phrase index per (topic, pair) pool and the ranked list;
- ``lift``: lift@k, hypergeometric p, the confidence interval and the release's null band;
- ``triviality``: SubspaceBERTScore recall against the group's identity words (encoders);
- ``sources``: hypotheses of the sample corpus, of the TMs' theories and of an LLM generator;
- ``sets``: the set jobs as plain functions (build a set from its source, write it);
- ``settings``: one settings class per rule (from the ``hypotheses`` config section);
- ``table``: the run's table (Benjamini-Hochberg q, the two-stage filter) and its plots;
- ``engine``: one reusable query function over prebuilt pool indexes (for interactive use);
- ``cli``: ``splits hypotheses <action>``.
"""
