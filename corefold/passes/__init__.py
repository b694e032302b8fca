"""Graph-to-graph transformations, one package per method; a pass returns what it changed."""
