"""The machinery of each feature that has any: one module or package per feature."""
