# Rules of the probes stage family.
