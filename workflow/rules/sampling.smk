# Rules of the sampling stage family.
