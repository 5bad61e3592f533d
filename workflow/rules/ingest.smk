# Rules of the ingest stage family.
