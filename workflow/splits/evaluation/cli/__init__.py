"""The evaluation stage family's commands, one module per ``splits`` subcommand (thin: parse the
paths, build the settings, call the plain functions of :mod:`splits.evaluation`, write outputs).

Rules pass their settings as ``--settings JSON`` (``splits.config.settings``); by hand,
``--config FILE`` reads the same settings from a config file with the schema's defaults filled.
"""
