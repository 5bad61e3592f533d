"""The sandbox: a local web page to try a lexicon's lift and browse the run's hypotheses table.

- ``typed``: a typed lexicon read into entries (one-line errors) and written back;
- ``query``: what a page asks, without any web library: answering a typed lexicon with the
  hypotheses stage's engine (the lift job's numbers), a session's Benjamini-Hochberg q, the
  run's table and its filters;
- ``views``: the answer as HTML (statistics, highlighted posts, the session) and the lift@k curve;
- ``app``: the Gradio page (``splits[sandbox]``);
- ``cli``: ``splits sandbox``.
"""
