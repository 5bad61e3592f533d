# Rules of the evaluation stage family.
