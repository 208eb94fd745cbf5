"""Files on disk: shipped resource paths, the user cache, atomic writes and the artefact cache."""
