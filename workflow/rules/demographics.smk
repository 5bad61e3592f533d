# Rules of the demographics stage family.
