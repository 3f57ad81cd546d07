"""A pooling server's vectors and scores, each asked for two ways and held to each other."""
