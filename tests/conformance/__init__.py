"""CockroachDB conformance: every statement the CockroachDB engine can send, checked against rules
taken from CockroachDB's source, with no database. See rules.py for the rules and their sources."""
