"""Graph passes: each a function over an IR graph that returns what it changed."""
