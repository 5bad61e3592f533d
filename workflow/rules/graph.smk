# Rules of the graph stage family.
