"""What the model actually sees: a fixed corpus of conversations rendered through ``/tokenize``.

``corpus.py`` holds the conversations (each one a branch a chat template
takes), ``render.py`` renders them on a server for the capture, and
``drift.py`` compares two captured renderings, showing the first differing
position as text on both sides.
"""
