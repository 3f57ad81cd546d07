"""Context length: /v1/models tells the truth, and the limit holds where it says (refused or clamped as declared)."""
