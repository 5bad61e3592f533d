"""The ingest stage family's subcommands, one module each: ``splits synth``, ``splits ingest``,
``splits merge-posts``, ``splits fetch-convokit``."""
