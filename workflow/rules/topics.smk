# Rules of the topics stage family.
