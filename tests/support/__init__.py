"""Helpers the tests share: no test lives here, and no test module imports another."""
