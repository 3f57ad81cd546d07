"""SIGTERM on a server the plugin owns: in-flight streams end as promised, new requests are refused, it goes in time."""
